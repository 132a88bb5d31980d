"""Group commit: the writes of several requests in one transaction, one fsync for all of them.

Request handlers on the event loop hand their write (a function of a session) to one writer
thread and await it. The writer takes every write waiting at that moment (up to ``MAX_BATCH``),
runs them in order in one transaction, commits, and only then answers each handler. So every
acknowledged request is durable (SQLite ``synchronous=FULL``), and under load one commit serves
many requests; an idle server commits each request on its own at once, with no added wait.

A write that refuses (raises ``refusal``, e.g. ``ApiError``) must do so before it writes
anything: the others of its batch go on, and it is answered with its refusal. Any other
exception may have left a write half done, so the whole transaction is rolled back and every
request of the batch gets the exception: none is acknowledged, none is stored.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from shoal.store.db import Database

T = TypeVar("T")
log = logging.getLogger("shoal.server")
MAX_BATCH = 128  # writes in one transaction at most
# A batch that begins with a heartbeat (``wake`` False: nobody but its agent waits on it, and
# only for durability) waits this long for more writes to share its commit: idle agents'
# heartbeats arrive spread out, one commit each otherwise (docs/cluster.md, "Heartbeats").
HEARTBEAT_LINGER_S = 0.02

# the write, whether its commit wakes the scheduler, and whom to answer
_Write = tuple[Callable[[Session], Any], bool, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class GroupCommit:
    """One writer thread, started on first use; ``after_commit`` runs once per committed batch
    (the scheduler's wake-up)."""

    def __init__(
        self, db: Database, refusal: type[Exception], after_commit: Callable[[], None]
    ) -> None:
        self.db = db
        self.refusal = refusal
        self.after_commit = after_commit
        self.batches = 0  # transactions committed (for the benchmark and tests)
        self.writes = 0
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, write: Callable[[Session], T], wake: bool = True) -> T:
        """``write(session)``'s result once the transaction it ran in has committed; with
        ``wake``, the commit runs ``after_commit`` (a heartbeat changes nothing it reads)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._start()
        self._queue.put((write, wake, loop, future))
        return await future

    def stop(self) -> None:
        """Finish what is queued, then end the writer thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=30)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="shoal-group-commit", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            until = time.monotonic() + (0.0 if first[1] else HEARTBEAT_LINGER_S)
            while len(batch) < MAX_BATCH:
                wait = until - time.monotonic()
                try:
                    more = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is not None and more[1]:
                    until = 0.0  # a write someone waits on: commit what is there now
                if more is None:
                    self._queue.put(None)  # end after this batch
                    break
                batch.append(more)
            self._commit(batch)

    def _commit(self, batch: list[_Write]) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            # a batch of heartbeats alone (``wake`` False) changes nothing a reader acts on
            with self.db.write(counted=any(wake for _, wake, _, _ in batch)) as session:
                for write, _, _, _ in batch:
                    try:
                        outcomes.append((write(session), None))
                    except self.refusal as exc:  # raised before it wrote: the batch goes on
                        outcomes.append((None, exc))
        except Exception as exc:  # rolled back: nobody is acknowledged
            if len(batch) > 1:  # so one bad write does not fail its neighbours: one by one
                for item in batch:
                    self._commit([item])
                return
            log.exception("a write failed and was rolled back")
            outcomes = [(None, exc)]
        else:
            self.batches += 1
            self.writes += len(batch)
            if any(wake for _, wake, _, _ in batch):
                self.after_commit()
        for (_, _, loop, future), (value, error) in zip(batch, outcomes, strict=True):
            loop.call_soon_threadsafe(_settle, future, value, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the client went away; its write stands (it was committed)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
