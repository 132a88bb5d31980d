"""Quiet reports answered from memory (docs/cluster.md, "Heartbeats cost reads, not writes").

An idle agent sends the same report every few seconds: the same nodes with the same capacity,
labels and state, the same running attempts; only the usage figures differ. Once such a report
was found quiet (``reports.quiet_report``: it changes nothing but heartbeats), the answer holds
for the same report until something a reader acts on changes in the store. Two counters say
when that may have happened:

* ``Database.changes_committed``: a write transaction of this process committed (checked on
  every report; a batch of heartbeats alone does not count);
* the change feed's generation (``store.change_feed``): any process wrote a job, task, node
  or VC change (the scheduler process, other servers). It is read at most every
  ``GENERATION_MAX_AGE_S``, so a change written elsewhere is seen that much later at most.

Both are read before the report is evaluated, so a change made during the evaluation makes the
kept answer stale at once. A kept answer is also dropped after ``MAX_AGE_S``, a safety net for
columns without a change-feed trigger that another process may write (labels an admin edits
through another server); every other change moves a counter. (At 30 s it sent one report in
three of an agent reporting every 10 s back to the store: a third of an idle server's CPU.)
What a hit still does: its heartbeats, when due, go through the group commit; a node found
lost there (no longer READY) sends the report down the write path, as before.

An idle agent's orders long poll is the same: it reads the store, finds nothing, and waits for
news about its nodes (``notify.NodeNews``). Every change that gives a node work sends that news,
and the versions are taken before the read; so while its nodes' versions have not moved since a
read that found nothing, the next poll with the same nodes and known attempts finds nothing too
and waits at once, without the read (``QuietPolls``; also at most ``MAX_AGE_S``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.protocol import OrdersRequest, ReportRequest
from shoal.store.change_feed import store_generation
from shoal.store.db import Database

if TYPE_CHECKING:
    from shoal.server.services.reports import QuietReport

Heartbeats = list[tuple[str, dict[str, Any]]]  # node, usage
GENERATION_MAX_AGE_S = 0.5
MAX_AGE_S = 300.0
# what differs from one idle report to the next and changes no answer
_FIGURES: Any = {"nodes": {"__all__": {"usage", "metrics"}}, "running": {"__all__": {"usage"}}}


def report_shape(request: ReportRequest) -> str:
    """The report without its usage figures: equal shapes get equal answers."""
    return request.model_dump_json(exclude=_FIGURES)


@dataclass
class Version:
    """What the store looked like to this process: both counters, read before an evaluation."""

    local: int
    epoch: int  # how many times the change feed's generation was seen to move


@dataclass
class KeptAnswer:
    shape: str
    version: Version
    kill: list[str]
    seen: dict[str, float]  # each node's last_seen as read or written since
    kept_at: float  # monotonic

    def due(self, request: ReportRequest, now: float, every: float) -> Heartbeats:
        """The nodes whose heartbeat is due, with their usage (``reports.heartbeats``)."""
        return [(n.name, dict(n.usage)) for n in request.nodes if self.seen[n.name] < now - every]

    def written(self, due: Heartbeats, now: float) -> None:
        for name, _ in due:
            self.seen[name] = now


class QuietAnswers:
    """The last quiet answer per agent, and the store's version it holds for."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._kept: dict[str, KeptAnswer] = {}
        self._generation = 0
        # moves whenever the generation read differs from the one before: on PostgreSQL the
        # generation can go back to an earlier value (the scheduler deletes the rows it read)
        self._epoch = 0
        self._generation_read_at = -float("inf")
        self._reading: asyncio.Lock | None = None
        self.hits = 0

    async def version(self) -> Version:
        """Both counters; the generation as read within the last ``GENERATION_MAX_AGE_S``."""
        local = self._db.changes_committed  # first: a commit after it makes the answer stale
        if time.monotonic() - self._generation_read_at > GENERATION_MAX_AGE_S:
            if self._reading is None:
                self._reading = asyncio.Lock()
            async with self._reading:  # many reports at once: one read
                if time.monotonic() - self._generation_read_at > GENERATION_MAX_AGE_S:
                    began = time.monotonic()
                    generation = await asyncio.to_thread(store_generation, self._db)
                    if generation != self._generation:
                        self._generation, self._epoch = generation, self._epoch + 1
                    self._generation_read_at = began
        return Version(local, self._epoch)

    def lookup(self, request: ReportRequest, shape: str, version: Version) -> KeptAnswer | None:
        kept = self._kept.get(request.agent_id)
        if kept is None or kept.shape != shape or kept.version != version:
            return None
        if time.monotonic() - kept.kept_at > MAX_AGE_S:
            return None
        self.hits += 1
        return kept

    def keep(
        self, request: ReportRequest, shape: str, version: Version, quiet: QuietReport
    ) -> KeptAnswer:
        kept = KeptAnswer(shape, version, list(quiet.stale), dict(quiet.seen), time.monotonic())
        self._kept[request.agent_id] = kept
        return kept

    def forget(self, agent_id: str) -> None:
        self._kept.pop(agent_id, None)


@dataclass
class _EmptyPoll:
    nodes: list[str]
    known: frozenset[str]
    seen: tuple[int, ...]  # the nodes' news versions, taken before the read that found nothing
    kept_at: float  # monotonic


class QuietPolls:
    """The last orders poll per agent that found nothing, and the news versions it holds for."""

    def __init__(self) -> None:
        self._empty: dict[str, _EmptyPoll] = {}
        self.hits = 0

    def still_empty(self, request: OrdersRequest, seen: tuple[int, ...]) -> bool:
        """Whether a read now would find nothing too: same nodes and known attempts, and no
        news about those nodes since the read that found nothing."""
        empty = self._empty.get(request.agent_id)
        if empty is None or empty.seen != seen or empty.nodes != request.nodes:
            return False
        if empty.known != frozenset(request.known):
            return False
        if time.monotonic() - empty.kept_at > MAX_AGE_S:
            return False
        self.hits += 1
        return True

    def found(self, request: OrdersRequest, seen: tuple[int, ...], anything: bool) -> None:
        """What a read (its versions ``seen`` taken before it) found for the agent."""
        if anything:
            self._empty.pop(request.agent_id, None)
            return
        known = frozenset(request.known)
        self._empty[request.agent_id] = _EmptyPoll(
            list(request.nodes), known, seen, time.monotonic()
        )
