"""The scheduler in a process of its own (``ServerSettings.scheduler == "process"``), so no cycle
holds the API's interpreter (docs/architecture.md, "The scheduler process").

The server starts ``python -m shoal.server.scheduler_main`` as its child, linked by a socket pair
(``scheduler_link.py``), and watches it: a child that dies is started again (after 0.5 s, doubling
up to 30 s while it keeps dying young). The two processes share only the store: the child reads
the change feed and writes its plans under the same write lock as the API (``store/db.py``). The
link carries wake-ups one way (a submission, an exit, a node change) and, the other way, the
agents' news (a launch or kill written: wake the long polls of these nodes) and the queue
positions the API shows, sent a few times a second: no request ever waits for the scheduler.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from shoal.server.context import ServerContext
from shoal.server.notify import Notifier
from shoal.server.positions import SentPositions
from shoal.server.scheduler_link import STOP, WAKE, Message, Outbox

log = logging.getLogger("shoal.scheduler")
FIRST_DELAY_S = 0.5  # before starting a child that died again
MAX_DELAY_S = 30.0
STEADY_S = 60.0  # a child that lived this long died "old": the next restart waits FIRST_DELAY_S
STOP_TIMEOUT_S = 10.0  # a child asked to stop, then SIGTERM, then SIGKILL


class SchedulerProcess:
    """Starts, watches, restarts and stops the scheduler's process; the server's end of the link.

    ``ctx.scheduler_wake`` and ``ctx.positions`` are pointed here by ``attach`` (in ``start``)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.positions = SentPositions()
        self._stopping = threading.Event()
        self._outbox: Outbox | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # _outbox, _child
        # a daemon: a server that exits without stopping it (no lifespan shutdown) still exits,
        # and its child then reads EOF and ends too
        self._watcher = threading.Thread(
            target=self._watch, name="shoal-scheduler-watch", daemon=True
        )

    def start(self) -> None:
        self.ctx.scheduler_wake = _ForwardedWake(self)
        self.ctx.positions = self.positions
        self._watcher.start()

    def stop(self) -> None:
        """Ask the child to finish its cycle and exit; terminate it if it does not."""
        self._stopping.set()
        with self._lock:
            outbox, child = self._outbox, self._child
        if outbox is not None:
            outbox.put(STOP)
        if child is not None:
            _end(child)
        self._watcher.join(timeout=STOP_TIMEOUT_S + 5)

    def wake(self) -> None:
        with self._lock:
            if self._outbox is not None:
                self._outbox.put(WAKE)

    def _watch(self) -> None:
        delay = FIRST_DELAY_S
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                child, connection = self._spawn()
            except OSError as exc:  # no process could be started (out of memory, no pids)
                log.error(
                    "could not start the scheduler process (%s); trying again in %.1f s", exc, delay
                )
            else:
                try:
                    self._read(connection)
                finally:
                    self._forget(child)
                code = child.wait()
                if self._stopping.is_set():
                    return
                delay = FIRST_DELAY_S if time.monotonic() - started >= STEADY_S else delay
                log.error(
                    "the scheduler process (pid %d) ended with %s; starting it again in %.1f s",
                    child.pid,
                    _describe(code),
                    delay,
                )
            self._stopping.wait(delay)
            delay = min(delay * 2, MAX_DELAY_S)

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Connection]:
        ours, theirs = socket.socketpair()
        try:
            with theirs:
                child = subprocess.Popen(
                    [sys.executable, "-m", "shoal.server.scheduler_main", str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                )
        except BaseException:
            ours.close()
            raise
        connection = Connection(ours.detach())
        outbox = Outbox(connection, "shoal-scheduler-link")
        outbox.put(("settings", self.ctx.settings))
        outbox.put(WAKE)  # a first cycle at once, whatever happened while none ran
        with self._lock:
            self._outbox, self._child = outbox, child
        return child, connection

    def _read(self, connection: Connection) -> None:
        """Act on the child's messages until it closes its end (it exited, or was killed)."""
        try:
            while True:
                try:
                    message: Message = connection.recv()
                except (EOFError, OSError):
                    return
                self._dispatch(message)
        finally:
            connection.close()

    def _dispatch(self, message: Message) -> None:
        kind = message[0]
        if kind == "news":
            self.ctx.wake_agents(message[1])
        elif kind == "positions":
            self.positions.update(message[1])
        elif kind == "ready":
            log.info("the scheduler process (pid %d) is ready", message[1])
        else:
            log.warning("the scheduler process sent an unknown message %r", kind)

    def _forget(self, child: subprocess.Popen[bytes]) -> None:
        """The child is gone: nothing more will come from it."""
        with self._lock:
            outbox, self._outbox = self._outbox, None
        self.positions.update([])  # none known until the next child sends its own
        if outbox is not None:
            outbox.close(timeout=1.0)
        if child.poll() is None and not self._stopping.is_set():
            _end(child)  # its end of the link closed, yet it runs: it cannot be told anything


class _ForwardedWake(Notifier):
    """``ctx.wake_scheduler()`` in the server: sent to the scheduler process."""

    def __init__(self, link: SchedulerProcess) -> None:
        super().__init__()
        self._link = link

    def notify(self) -> None:
        super().notify()
        self._link.wake()


def _end(child: subprocess.Popen[Any]) -> None:
    """Wait for ``child`` to exit; SIGTERM it, then SIGKILL it, if it takes too long."""
    for signal_it in (None, child.terminate, child.kill):
        if signal_it is not None:
            signal_it()
        try:
            child.wait(STOP_TIMEOUT_S if signal_it is None else 5.0)
            return
        except subprocess.TimeoutExpired:
            continue


def _describe(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"
