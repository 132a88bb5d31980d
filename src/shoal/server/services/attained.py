"""Attained service: how much GPU time each active job has had, and the priority the scheduler
uses for it in a VC that switched aging on (``shoal.core.aging``, the function the simulator's
``las`` policy uses too).

A job's attained GPU-seconds are the sum over its task rows, over every attempt, of the task's
GPUs x its run time: the earlier attempts of a task retried in place (``earlier_usage``), then
the current one from its start to its end, or to ``now`` while it still holds its GPUs. That is
the GPU time ``shoal job show`` accounts (services/accounting.py).

Two ways to apply it, the same priorities:
- ``scheduling_priorities(session, now)``: one cycle's view from the store (one query of the
  tasks of active jobs in aging VCs); a snapshot built from the store passes every queued
  request and running allocation through it.
- ``AgingTracker``: for a scheduler that keeps an in-memory model and reloads only the jobs that
  changed. A job's service is a line in time (``banked + GPUs running x now - since``), read from
  its task rows when the model reloads it; the tracker knows when each running job reaches its
  next threshold and says, each cycle, which jobs crossed one (their priority changes; nobody
  else's does), so a cycle costs the jobs that changed.

A job that waits keeps the level of the service it had (it is requeued after preemption, say),
and a running job that crossed a threshold holds its tasks at its lower level, which is what lets
a job with less service preempt it (when the VC allows preemption within it). With no aging VC
this costs one query of the VC table.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.aging import Aging, aged_priority, level, next_threshold, protected
from shoal.core.snapshot import JobRequest, TaskAllocation
from shoal.core.states import State
from shoal.server.services.vc_loading import load_aging
from shoal.store.models import Job, Task

ACTIVE = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


CHUNK = 500  # job ids per IN (...) query


@dataclass(slots=True)
class Served:
    """A job's attained GPU-seconds as a line in time: what its ended runs had (``banked``), plus
    its running tasks' GPUs x (now - their start), kept as ``gpus x now - since``."""

    banked: float = 0.0
    gpus: int = 0  # GPUs of its tasks that started and have not ended
    since: float = 0.0  # the sum of those tasks' GPUs x start time
    preempted: int = 0  # times the job went back to the queue for resources (preemption)

    def add_task(
        self, gpus: int, started_at: float | None, finished_at: float | None, earlier: Any
    ) -> None:
        """One task row: the earlier attempts of a task retried in place, then the current
        attempt, ended or still running."""
        self.banked += gpus * float((earlier or {}).get("runSeconds", 0.0))
        if started_at is None:
            return
        if finished_at is not None:
            self.banked += gpus * max(finished_at - started_at, 0.0)
        else:
            self.gpus += gpus
            self.since += gpus * started_at

    def at(self, now: float) -> float:
        return max(self.banked + self.gpus * now - self.since, self.banked)


_TASK_RUNS = (
    Task.job_id,
    Task.gpu_indices,
    Task.started_at,
    Task.finished_at,
    Task.earlier_usage,
    Job.retries_resource,
)


def _fold(rows: Iterable[Any]) -> dict[str, Served]:
    served: dict[str, Served] = {}
    for job_id, gpus, started, finished, earlier, preempted in rows:
        if started is None and not earlier:
            continue  # never started: no service
        line = served.get(job_id)
        if line is None:
            line = served[job_id] = Served(preempted=preempted or 0)
        line.add_task(len(gpus or ()), started, finished, earlier)
    return served


def served_by_job(
    session: Session, virtual_clusters: Collection[str] | None = None
) -> dict[str, Served]:
    """The service line of every active job (of these VCs; None: all) that ever started a
    task; a job that never ran is absent. One query, over the tasks of active jobs."""
    query = select(*_TASK_RUNS).join(Job, Job.id == Task.job_id).where(Job.state.in_(ACTIVE))
    if virtual_clusters is not None:
        query = query.where(Job.virtual_cluster.in_(list(virtual_clusters)))
    return _fold(session.execute(query))


def attained_gpu_seconds(
    session: Session, now: float, virtual_clusters: Collection[str] | None = None
) -> dict[str, float]:
    """GPU-seconds per active job (of these VCs; None: all) that has ever started a task: GPUs x
    run time over every attempt, the running one until ``now`` (what ``job show`` accounts)."""
    return {job: line.at(now) for job, line in served_by_job(session, virtual_clusters).items()}


@dataclass(frozen=True, slots=True)
class SchedulingPriorities:
    """The priority the scheduler uses for each job of a cycle (its own, aged in aging VCs)."""

    aging: Mapping[str, Aging]
    served: Mapping[str, Served]
    now: float

    def of(self, job_id: str, virtual_cluster: str, priority: int, running: bool = False) -> int:
        """For the job's queue entry, or (``running``) for the tasks it holds."""
        aging = self.aging.get(virtual_cluster)
        line = self.served.get(job_id)
        if aging is None or line is None:
            return priority  # no aging, or no service yet
        return aged_priority(priority, line.at(self.now), aging, line.preempted, running)

    def request(self, job: JobRequest) -> JobRequest:
        """The queued job at its scheduling priority (the same object when unchanged)."""
        priority = self.of(job.job_id, job.virtual_cluster, job.priority)
        return job if priority == job.priority else replace(job, priority=priority)

    def allocation(self, alloc: TaskAllocation) -> TaskAllocation:
        """A running task held at its job's scheduling priority (the same object when
        unchanged)."""
        priority = self.of(alloc.job_id, alloc.virtual_cluster, alloc.priority, running=True)
        return alloc if priority == alloc.priority else replace(alloc, priority=priority)


def scheduling_priorities(session: Session, now: float) -> SchedulingPriorities:
    """What one cycle needs to age its jobs: the aging VCs and the service their jobs had."""
    aging = load_aging(session)
    if not aging:
        return SchedulingPriorities({}, {}, now)
    return SchedulingPriorities(aging, served_by_job(session, aging.keys()), now)


@dataclass
class AgingTracker:
    """Scheduling priorities for an in-memory scheduler model, kept current incrementally.

    The model calls ``reload`` for the jobs it reloads from the store (their task rows are read
    again), ``configure`` when the VCs changed, and each cycle ``crossed(now)`` for the jobs whose
    service reached a threshold since they were priced: it builds their queue entry or
    allocations again through ``request``/``allocation``, passing the objects it holds: the
    tracker remembers each job's own priority from the first objects priced after a reload (the
    ones built from the store, which carry it), so objects it aged can be priced again."""

    aging: dict[str, Aging] = field(default_factory=dict)
    _served: dict[str, Served] = field(default_factory=dict)
    _vc: dict[str, str] = field(default_factory=dict)
    _priced: dict[str, int] = field(default_factory=dict)  # job -> level it was priced at
    _own: dict[str, int] = field(default_factory=dict)  # job -> its own priority
    _checks: list[tuple[float, str]] = field(default_factory=list)

    def configure(self, aging: Mapping[str, Aging]) -> bool:
        """The aging VCs now; True when that changed (then reload every job)."""
        if dict(aging) == self.aging:
            return False
        self.aging = dict(aging)
        self._served.clear()
        self._vc.clear()
        self._priced.clear()
        self._own.clear()
        self._checks.clear()
        return True

    def reload(self, session: Session, jobs: Mapping[str, str], now: float) -> None:
        """Read the service of ``jobs`` (job id -> its VC) again; jobs of VCs without aging,
        and jobs no longer active, are forgotten."""
        for job_id in jobs:
            self._served.pop(job_id, None)
            self._vc.pop(job_id, None)
            self._priced.pop(job_id, None)
            self._own.pop(job_id, None)
        ids = sorted(job_id for job_id, vc in jobs.items() if vc in self.aging)
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            query = (
                select(*_TASK_RUNS)
                .join(Job, Job.id == Task.job_id)
                .where(Task.job_id.in_(chunk), Job.state.in_(ACTIVE))
            )
            for job_id, line in _fold(session.execute(query)).items():
                self._served[job_id] = line
                self._vc[job_id] = jobs[job_id]
                self._watch(job_id, now)

    def priority(
        self, job_id: str, virtual_cluster: str, own: int, now: float, running: bool = False
    ) -> int:
        """The job's scheduling priority at ``now``, for its queue entry or (``running``) its
        tasks (``own``: its own, unless the tracker has it from an earlier pricing since the
        job was last reloaded)."""
        aging = self.aging.get(virtual_cluster)
        if aging is None:
            return own
        own = self._own.setdefault(job_id, own)
        line = self._served.get(job_id)
        served = 0.0 if line is None else line.at(now)
        preempted = 0 if line is None else line.preempted
        self._priced[job_id] = level(served, aging)
        return aged_priority(own, served, aging, preempted, running)

    def request(self, job: JobRequest, now: float) -> JobRequest:
        """``job`` at its scheduling priority (the same object when unchanged)."""
        priority = self.priority(job.job_id, job.virtual_cluster, job.priority, now)
        return job if priority == job.priority else replace(job, priority=priority)

    def allocation(self, alloc: TaskAllocation, now: float) -> TaskAllocation:
        job_id, vc = alloc.job_id, alloc.virtual_cluster
        priority = self.priority(job_id, vc, alloc.priority, now, running=True)
        return alloc if priority == alloc.priority else replace(alloc, priority=priority)

    def crossed(self, now: float) -> list[str]:
        """The jobs whose service reached another threshold since they were priced (each once),
        in the order they crossed; only running jobs' service grows."""
        due: list[str] = []
        while self._checks and self._checks[0][0] <= now:
            _, job_id = heapq.heappop(self._checks)
            if job_id in self._served and job_id not in due:
                due.append(job_id)
        changed = []
        for job_id in due:
            aging = self.aging[self._vc[job_id]]
            line = self._served[job_id]
            if protected(aging, line.preempted):
                continue  # it runs at its own priority whatever its service
            if level(line.at(now), aging) != self._priced.get(job_id, 0):
                changed.append(job_id)
            self._watch(job_id, now)
        return changed

    def _watch(self, job_id: str, now: float) -> None:
        """A check when the running job reaches the threshold after its level now."""
        line = self._served[job_id]
        aging = self.aging[self._vc[job_id]]
        if not line.gpus or protected(aging, line.preempted):
            return  # its service does not grow, or it runs at its own priority
        served = line.at(now)
        threshold = next_threshold(served, aging)
        if threshold is not None:
            heapq.heappush(self._checks, (now + (threshold - served) / line.gpus, job_id))
