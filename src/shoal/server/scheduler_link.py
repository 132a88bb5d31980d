"""The link between the API server and its scheduler process: the messages both sides speak, and
the sending half they share.

One Unix socket pair, framed and pickled by ``multiprocessing.connection.Connection``. Messages
are tuples whose first item names them:

server -> scheduler
    ``("settings", ServerSettings)``   first, once
    ``("wake",)``                       something the scheduler reads changed (coalesced)
    ``("stop",)``                       finish the cycle under way and exit

scheduler -> server
    ``("ready", pid)``                  the model is loaded; cycles run
    ``("news", [node names] | None)``   agents of these nodes (None: all) have orders waiting
    ``("positions", [text])``           a cycle's queues (``QueuePositions.encoded``), sent
                                        before its plan is written; rate-limited

Both sides send from several threads through an ``Outbox``: one sender thread owns the socket's
writing end, so no caller ever blocks on a peer that is slow to read, and wake-ups asked for while
one is already waiting to go out are sent once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("shoal.scheduler")

Message = tuple[Any, ...]
WAKE: Message = ("wake",)
STOP: Message = ("stop",)


class Outbox:
    """Messages to the peer, written by one thread; ``wake`` is coalesced."""

    def __init__(self, connection: Connection, name: str) -> None:
        self._connection = connection
        self._condition = threading.Condition()
        self._queue: deque[Message] = deque()
        self._wake_due = False
        self._closed = False
        self._thread = threading.Thread(target=self._send_all, name=name, daemon=True)
        self._thread.start()

    def put(self, message: Message) -> None:
        with self._condition:
            if self._closed:
                return
            if message == WAKE:
                if self._wake_due:
                    return
                self._wake_due = True
            self._queue.append(message)
            self._condition.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (waiting up to ``timeout``), then stop the sender thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)

    def _send_all(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return  # closed, and everything sent
                message = self._queue.popleft()
                if message == WAKE:
                    self._wake_due = False
            try:
                self._connection.send(message)
            except OSError:  # the peer is gone: nobody reads what would follow
                with self._condition:
                    self._queue.clear()
                    self._closed = True
                return
