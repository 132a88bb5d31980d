"""Live updates for the dashboard: one change generation, shared by every open page.

Triggers (migration 0017) note every change to what pages show (a job's or task's state, node,
resources; a node's state; a VC) in ``sched_changes``, whichever process wrote it (the API, the
scheduler, an agent's report), and their counter (``store/change_feed.py``) is a cheap "something
changed" signal: one indexed row read per interval for the whole server, and only while a page
listens. Each page then reloads
what it shows (``routers/stream.py``)."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.concurrency import run_in_threadpool

from shoal.store.change_feed import store_generation
from shoal.store.db import Database


class ChangeWatch:
    """Polls the generation every ``interval`` seconds while anyone waits on it."""

    def __init__(self, db: Database, interval: float = 0.5) -> None:
        self._db = db
        self._interval = interval
        self._generation: int | None = None
        self._changed = asyncio.Event()
        self._listeners = 0
        self._poller: asyncio.Task[None] | None = None

    def read(self) -> int:
        return store_generation(self._db)

    async def current(self) -> int:
        if self._generation is None:
            self._generation = await run_in_threadpool(self.read)
        return self._generation

    async def wait(self, seen: int, timeout: float) -> int:
        """The generation once it moves past ``seen``, or after ``timeout`` seconds."""
        self._listeners += 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        try:
            generation = await self.current()
            if generation != seen:
                return generation
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
            return self._generation or 0
        finally:
            self._listeners -= 1

    async def _poll(self) -> None:
        while self._listeners > 0:
            await asyncio.sleep(self._interval)
            try:
                generation = await run_in_threadpool(self.read)
            except Exception:  # a locked or busy store: try again next interval
                continue
            if generation != self._generation:
                self._generation = generation
                changed, self._changed = self._changed, asyncio.Event()
                changed.set()

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
