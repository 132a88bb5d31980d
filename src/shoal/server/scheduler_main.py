"""The scheduler process (``python -m shoal.server.scheduler_main FD``), started and watched by the
API server (``scheduler_process.py``) with its end of the link on file descriptor FD.

It runs the same ``SchedulerLoop`` the server runs in a thread in ``scheduler="thread"`` mode, on
a context of its own: its own store connections, model and cache. Agents' news goes back over the
link, and so do the queue positions each cycle publishes (at most every ``POSITIONS_EVERY_S``);
wake-ups come in over it. It exits when asked to stop, on SIGTERM, and when the server's end of
the link closes (the server exited or was killed), after the cycle under way. Ctrl-C at a
terminal reaches the whole process group: the server stops it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType

from shoal.server.context import ServerContext
from shoal.server.loop import SchedulerLoop, SchedulerState
from shoal.server.notify import NodeNews
from shoal.server.positions import Positions, QueuePositions
from shoal.server.scheduler_link import Message, Outbox
from shoal.server.settings import ServerSettings
from shoal.server.store_news import install_announcer
from shoal.store.db import Database, home_store

log = logging.getLogger("shoal.scheduler")
LOCK_FILE = "scheduler.lock"
# Positions are sent after each cycle, but no sooner after the last sending than
# POSITIONS_COST x what encoding it took (so a deep queue's positions cost both processes a few
# per cent of a core), and never later than POSITIONS_EVERY_S after the cycle that published them.
POSITIONS_EVERY_S = 0.2
POSITIONS_COST = 40


class _ForwardedNews(NodeNews):
    """``ctx.wake_agents(nodes)`` in the scheduler process: sent to the server, whose long polls
    the agents wait on."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__()
        self._outbox = outbox

    def news(self, nodes: Iterable[str] | None = None) -> None:
        self._outbox.put(("news", None if nodes is None else sorted(set(nodes))))


class SchedulerChild:
    def __init__(self, connection: Connection, settings: ServerSettings) -> None:
        self.connection = connection
        self.outbox = Outbox(connection, "shoal-scheduler-link")
        db = Database(settings.database_url or home_store(settings.home))
        self.ctx = ServerContext(settings=replace(settings, scheduler="thread"), db=db)
        self.ctx.agent_work = _ForwardedNews(self.outbox)
        if not db.is_sqlite:  # its plans' news reach the other servers on the store too
            install_announcer(db, self.ctx.server_id)
        self.ctx.scheduler_state = SchedulerState(freeze_heap=True, on_positions=self._positions)
        self._sending = threading.Condition()
        self._latest: Positions = self.ctx.positions
        self._sent: Positions = self._latest
        self._sent_at = 0.0
        self._gap = 0.0  # the least time between two sendings (POSITIONS_COST x encoding time)
        self.loop = SchedulerLoop(self.ctx)
        self.stopped = threading.Event()

    def run(self) -> None:
        for target, name in ((self._read, "read"), (self._send_late, "positions")):
            threading.Thread(target=target, name=f"shoal-scheduler-{name}", daemon=True).start()
        with _only_scheduler(self.ctx.settings.home, self.stopped) as got:
            if got:
                self.outbox.put(("ready", os.getpid()))
                self.loop.run()
        self.outbox.close()
        self.ctx.db.dispose()

    def stop(self) -> None:
        self.stopped.set()
        with self._sending:
            self._sending.notify_all()
        self.loop.request_stop()

    def _positions(self, positions: Positions) -> None:
        """A cycle published ``positions`` (called on the loop's thread, before its plan is
        written): sent now, unless the last were sent less than the gap ago; then ``_send_late``
        sends the latest once the gap has passed."""
        with self._sending:
            self._latest = positions
            if time.monotonic() - self._sent_at < self._gap:
                self._sending.notify()
                return
        self._send(positions)

    def _send(self, positions: Positions) -> None:
        with self._sending:  # one sender at a time, and never one older than the last sent
            if positions is not self._latest or positions is self._sent:
                return
            started = time.monotonic()
            if isinstance(positions, QueuePositions):
                self.outbox.put(("positions", positions.encoded()))
            self._sent, self._sent_at = positions, time.monotonic()
            took = self._sent_at - started
            self._gap = min(took * POSITIONS_COST, POSITIONS_EVERY_S)

    def _send_late(self) -> None:
        def unsent() -> bool:
            return self._latest is not self._sent or self.stopped.is_set()

        while not self.stopped.is_set():
            with self._sending:
                self._sending.wait_for(unsent)
                wait = self._sent_at + self._gap - time.monotonic()
            if wait > 0 and self.stopped.wait(wait):
                return
            self._send(self._latest)

    def _read(self) -> None:
        while True:
            try:
                message: Message = self.connection.recv()
            except (EOFError, OSError):  # the server is gone: nobody would read what we decide
                self.stop()
                return
            kind = message[0]
            if kind == "wake":
                self.ctx.wake_scheduler()
            elif kind == "stop":
                self.stop()
            else:
                log.warning("the server sent an unknown message %r", kind)


@contextmanager
def _only_scheduler(home: Path, stopped: threading.Event) -> Iterator[bool]:
    """One scheduler process per home: a child started while the previous one (left over from a
    server killed with SIGKILL) finishes its last cycle waits for it. Yields False if asked to
    stop while waiting."""
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while not stopped.is_set():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stopped.wait(0.1)
                continue
            yield True
            return
        yield False
    finally:
        os.close(fd)  # releases the lock


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(format="shoal scheduler: %(levelname)s %(message)s", level=logging.WARNING)
    connection = Connection(int(argv[1]))
    try:
        kind, settings = connection.recv()
    except (EOFError, OSError):
        return 0  # the server went away before saying anything
    if kind != "settings" or not isinstance(settings, ServerSettings):
        log.error("the server's first message was %r, not its settings", kind)
        return 2
    child = SchedulerChild(connection, settings)

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        child.stop()

    signal.signal(signal.SIGTERM, on_term)
    child.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
