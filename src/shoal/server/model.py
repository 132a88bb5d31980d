"""The scheduler's in-memory model of the store: nodes, VCs, running allocations and the queue.

The store stays the single source of truth; the model is a cache of what the scheduler reads,
rebuilt from the store at start, then kept current from the change feed (``sched_changes``, filled
by triggers in the writers' own transactions, migration 0017): each cycle reloads only the jobs
and nodes named there. It is verified against a full load periodically; a mismatch is logged and
repaired by adopting the full load. One owner: the scheduler loop is the only code that reads or
changes it (the API reads queue positions through the immutable ``QueuePositions`` it publishes).

The snapshot it hands to ``core.schedule`` reuses the same tuples and objects while nothing
changed, which is what lets the caller-owned ``SchedulerCache`` match them by identity.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.orm import Session

from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    TaskAllocation,
    VirtualCluster,
)
from shoal.server.context import ServerContext
from shoal.server.services.attained import AgingTracker
from shoal.server.services.nodes import load_nodes
from shoal.server.services.snapshot import _HOLDING, _TASK_COLUMNS, _WAITING, allocation, request_of
from shoal.server.services.vc_loading import load_aging, load_virtual_clusters
from shoal.store.models import Job, SchedChange, Task

log = logging.getLogger("shoal.scheduler")
CHUNK = 500  # ids per IN (...) query
_CHANGES = select(SchedChange.seq, SchedChange.kind, SchedChange.key).where(
    SchedChange.seq > bindparam("after")
)
_LAST_SEQ = select(func.max(SchedChange.seq))


@dataclass(eq=False)
class SchedulerModel:
    nodes: tuple[NodeState, ...] = ()
    vcs: tuple[VirtualCluster, ...] = ()
    queue: dict[str, JobRequest] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    allocations: dict[str, tuple[TaskAllocation, ...]] = field(default_factory=dict)
    seq: int = 0  # the last change read
    loaded: bool = False
    # Per-VC attained-service aging (services/attained.py): queue entries and allocations of
    # jobs in aging VCs carry their aged priority; each cycle reprices the jobs that crossed a
    # threshold since (``reprice``).
    aging: AgingTracker = field(default_factory=AgingTracker)
    _queue_tuple: tuple[JobRequest, ...] | None = None
    _alloc_tuple: tuple[TaskAllocation, ...] | None = None

    # ----------------------------------------------------------------------------------------
    # Loading and keeping current
    # ----------------------------------------------------------------------------------------

    def load(self, ctx: ServerContext, session: Session) -> None:
        """Everything from the store (one read transaction, so it matches ``seq``)."""
        self.seq = session.execute(_LAST_SEQ).scalar() or 0
        self.nodes = tuple(load_nodes(session))
        self.vcs = load_virtual_clusters(session, list(self.nodes))
        self.aging.configure(load_aging(session))
        self.queue, self.versions = {}, {}
        self._reload_jobs(ctx, session, None)
        self.loaded = True
        self._queue_tuple = self._alloc_tuple = None

    def refresh(self, ctx: ServerContext, session: Session) -> int:
        """Reload what the change feed names (and the jobs whose aged priority changed);
        returns how many changes were read."""
        if not self.loaded:
            self.load(ctx, session)
            return 0
        rows = session.execute(_CHANGES, {"after": self.seq}).all()
        crossed = self.aging.crossed(ctx.clock())  # aged priorities that changed with time
        if not rows and not crossed:
            return 0
        self.seq = rows[-1].seq if rows else self.seq
        jobs = {row.key for row in rows if row.kind == "job"} | set(crossed)
        if any(row.kind in ("node", "vc") for row in rows):
            nodes = tuple(load_nodes(session))
            if nodes != self.nodes:
                self.nodes = nodes
            self.vcs = load_virtual_clusters(session, list(self.nodes))
            if self.aging.configure(load_aging(session)):
                self._reload_jobs(ctx, session, None)  # every aging VC's jobs priced anew
                return len(rows)
        if jobs:
            self._reload_jobs(ctx, session, jobs)
        return len(rows)

    def _reload_jobs(self, ctx: ServerContext, session: Session, ids: set[str] | None) -> None:
        """The queue entries and allocations of ``ids`` (None: of every job) from the store."""
        connection = session.connection()
        now = ctx.clock()
        chunks: Iterable[Sequence[str] | None] = [None]
        if ids is not None:
            ordered = sorted(ids)
            chunks = [ordered[i : i + CHUNK] for i in range(0, len(ordered), CHUNK)]
            for job_id in ids:
                self.queue.pop(job_id, None)
                # its row changed: the pending reason last written may not be there any more
                # (an image hold replaces it, image_holds.py), so the next cycle writes it again
                ctx.reasons.pop(job_id, None)
                seen = self.versions.pop(job_id, None)
                if seen is not None:  # parsed again if it is still queued
                    ctx.requests.pop((job_id, seen), None)
                self.allocations.pop(job_id, None)
        else:
            self.allocations = {}
        for chunk in chunks:
            waiting = _WAITING if chunk is None else _WAITING.where(Job.id.in_(chunk))
            rows = connection.execute(waiting).all()
            wanted = {row.id: row.version for row in rows}
            holding = _HOLDING if chunk is None else _HOLDING.where(Task.job_id.in_(chunk))
            cut = len(_TASK_COLUMNS)
            grouped: dict[str, list[TaskAllocation]] = {}
            for row in connection.execute(holding):
                grouped.setdefault(row.job_id, []).append(allocation(row, row[cut:]))
            if self.aging.aging:  # read the service of the jobs met here again
                vcs = {row.id: row.virtual_cluster for row in rows}
                vcs.update((job_id, held[0].virtual_cluster) for job_id, held in grouped.items())
                if chunk is not None:
                    vcs.update((job_id, "") for job_id in chunk if job_id not in vcs)
                self.aging.reload(session, vcs, now)
            if wanted:
                jobs = session.scalars(select(Job).where(Job.id.in_(list(wanted))))
                for job in jobs:
                    if wanted.get(job.id) == job.version:
                        request = request_of(ctx, job)
                        self.queue[job.id] = self.aging.request(request, now)
                        self.versions[job.id] = job.version
            for job_id, held in grouped.items():
                self.allocations[job_id] = tuple(self.aging.allocation(a, now) for a in held)
        if ids is None:  # parsed requests of jobs no longer queued are not kept
            for key in [k for k in ctx.requests if self.versions.get(k[0]) != k[1]]:
                del ctx.requests[key]
        self._queue_tuple = self._alloc_tuple = None

    def forget_processed(self, session: Session) -> None:
        """Delete the change rows already read (called in a write transaction, now and then)."""
        session.execute(delete(SchedChange).where(SchedChange.seq <= self.seq))

    # ----------------------------------------------------------------------------------------
    # What the scheduler reads
    # ----------------------------------------------------------------------------------------

    def snapshot(self) -> tuple[ClusterSnapshot, dict[str, int]]:
        if self._queue_tuple is None:
            self._queue_tuple = tuple(self.queue.values())
        if self._alloc_tuple is None:
            self._alloc_tuple = tuple(a for held in self.allocations.values() for a in held)
        snapshot = ClusterSnapshot(self.nodes, self._queue_tuple, self._alloc_tuple, self.vcs)
        return snapshot, self.versions

    # ----------------------------------------------------------------------------------------
    # Verification
    # ----------------------------------------------------------------------------------------

    def verify(self, ctx: ServerContext, session: Session) -> list[str]:
        """Compare with a full load from the store; on a mismatch, log it and adopt the load.
        Returns the mismatches found (empty: the model was right). The model reads the change
        feed first, in the same ``session``: given one snapshot (``Database.snapshot``), a change
        committed since its last refresh is then not taken for a difference."""
        self.refresh(ctx, session)
        truth = SchedulerModel()
        truth.load(ctx, session)
        found = _differences(self, truth)
        if found:
            for line in found[:20]:
                log.warning("scheduler model differed from the store: %s (repaired)", line)
            if len(found) > 20:
                log.warning("... and %d more differences (repaired)", len(found) - 20)
            self.nodes, self.vcs = truth.nodes, truth.vcs
            self.queue, self.versions = truth.queue, truth.versions
            self.allocations, self.aging = truth.allocations, truth.aging
            self._queue_tuple = self._alloc_tuple = None
        self.seq = max(self.seq, truth.seq)
        return found


def _differences(model: SchedulerModel, truth: SchedulerModel) -> list[str]:
    found: list[str] = []
    if model.nodes != truth.nodes:
        found.append("nodes")
    if model.vcs != truth.vcs:
        found.append("virtual clusters")
    for job_id in sorted(model.versions.keys() ^ truth.versions.keys()):
        where = "queued in the model only" if job_id in model.versions else "missing from queue"
        found.append(f"job {job_id}: {where}")
    for job_id in sorted(model.versions.keys() & truth.versions.keys()):
        if model.versions[job_id] != truth.versions[job_id]:
            found.append(f"job {job_id}: queued version {model.versions[job_id]} is stale")
    for job_id in sorted(model.allocations.keys() | truth.allocations.keys()):
        mine = sorted(model.allocations.get(job_id, ()), key=_task_key)
        real = sorted(truth.allocations.get(job_id, ()), key=_task_key)
        if mine != real:
            found.append(f"job {job_id}: {len(mine)} tasks held in the model, {len(real)} in store")
    return found


def _task_key(alloc: TaskAllocation) -> tuple[str, int]:
    return (alloc.role, alloc.index)
