"""Wake-ups: between threads (a generation counter under a condition variable, for the scheduler)
and from threads to long polls waiting on the event loop (per node, for the agents)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


class Notifier:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the generation moves past ``seen`` or ``timeout`` passes; return it."""
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen, timeout=timeout)
            return self._generation


class NodeNews:
    """News for agents, per node: long polls wait on the event loop, woken only by news about one
    of their nodes (or news for all, ``nodes=None``).

    Each node has a version, and ``news`` (callable from any thread) bumps it. A waiter takes the
    versions of its nodes (``versions``) *before* reading the store; ``wait`` registers it and
    compares the versions under the same lock ``news`` bumps them under, so news recorded between
    the read and the wait ends the wait at once instead of being lost. Waiters are futures of the
    event loop that awaits them; ``news`` resolves them there (``call_soon_threadsafe``), so no
    thread is held while an agent waits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all = 0  # bumped by news for every node
        self._versions: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def versions(self, nodes: Sequence[str]) -> tuple[int, ...]:
        with self._lock:
            return self._seen(nodes)

    def _seen(self, nodes: Sequence[str]) -> tuple[int, ...]:
        return (self._all, *(self._versions.get(node, 0) for node in nodes))

    def news(self, nodes: Iterable[str] | None = None) -> None:
        """Something changed for ``nodes`` (every node if None): wake their waiters."""
        with self._lock:
            if nodes is None:
                self._all += 1
                woken = {f for waiters in self._waiters.values() for f in waiters}
            else:
                woken = set()
                for node in set(nodes):
                    self._versions[node] = self._versions.get(node, 0) + 1
                    woken.update(self._waiters.get(node, ()))
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for future in woken:
            by_loop.setdefault(future.get_loop(), []).append(future)
        for loop, futures in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
                loop.call_soon_threadsafe(_resolve, futures)

    async def wait(self, nodes: Sequence[str], seen: tuple[int, ...], timeout: float) -> bool:
        """Wait up to ``timeout`` for news about ``nodes`` newer than ``seen``; True if any."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._seen(nodes) != seen:
                return True
            for node in nodes:
                self._waiters.setdefault(node, set()).add(future)
        try:
            done, _ = await asyncio.wait([future], timeout=timeout)
            return bool(done)
        finally:
            with self._lock:
                for node in nodes:
                    waiters = self._waiters.get(node)
                    if waiters is not None:
                        waiters.discard(future)
                        if not waiters:
                            del self._waiters[node]

    def waiting(self) -> int:
        """How many nodes have a waiter (for tests and diagnostics)."""
        with self._lock:
            return len(self._waiters)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


NEWS_KEY = "shoal.agent_news"


def note_news(session: Session, nodes: Iterable[str | None]) -> None:
    """Remember, for this transaction, that agents of ``nodes`` have news (launch or kill)."""
    news: set[str] = session.info.setdefault(NEWS_KEY, set())
    news.update(node for node in nodes if node)


def noted_news(session: Session) -> set[str]:
    """The nodes ``note_news`` named during this session's transaction."""
    return set(session.info.get(NEWS_KEY, ()))
