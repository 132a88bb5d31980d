"""Attained service: how much GPU time each active job has had, and the priority the scheduler
uses for it in a VC that switched aging on (``shoal.core.aging``, the function the simulator's
``las`` policy uses too).

A job's attained GPU-seconds are the sum over its task rows, over every attempt, of the task's
GPUs x its run time: the earlier attempts of a task retried in place (``earlier_usage``), then
the current one from its start to its end, or to ``now`` while it still holds its GPUs. That is
the GPU time ``shoal job show`` accounts (services/accounting.py).

The snapshot calls ``scheduling_priorities`` once per cycle, then passes every queued request
and every running allocation through it: a job that waits keeps the level of the service it had
(it is requeued after preemption, say), and a running job that crossed a threshold holds its
tasks at its lower level, which is what lets a job with less service preempt it (when the VC
allows preemption within it). With no aging VC this costs one query of the VC table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.aging import Aging, aged_priority
from shoal.core.snapshot import JobRequest, TaskAllocation
from shoal.core.states import State
from shoal.server.services.vcs import load_aging
from shoal.store.models import Job, Task

ACTIVE = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


def task_gpu_seconds(
    gpus: int,
    started_at: float | None,
    finished_at: float | None,
    earlier: Mapping[str, Any],
    now: float,
) -> float:
    """One task row's GPU time: its earlier attempts, then the current one until its end or
    ``now``."""
    seconds = float(earlier.get("runSeconds", 0.0))
    if started_at is not None:
        end = finished_at if finished_at is not None else now
        seconds += max(end - started_at, 0.0)
    return gpus * seconds


def attained_gpu_seconds(
    session: Session, now: float, virtual_clusters: Collection[str] | None = None
) -> dict[str, float]:
    """GPU-seconds per active job (of these VCs; None: all) that has ever started a task; a
    job that never ran is absent (it has had none). One query, over the tasks of active jobs."""
    query = (
        select(Task.job_id, Task.gpu_indices, Task.started_at, Task.finished_at, Task.earlier_usage)
        .join(Job, Job.id == Task.job_id)
        .where(Job.state.in_(ACTIVE))
    )
    if virtual_clusters is not None:
        query = query.where(Job.virtual_cluster.in_(list(virtual_clusters)))
    attained: dict[str, float] = {}
    for job_id, gpus, started, finished, earlier in session.execute(query):
        if started is None and not earlier:
            continue
        served = task_gpu_seconds(len(gpus or ()), started, finished, earlier or {}, now)
        attained[job_id] = attained.get(job_id, 0.0) + served
    return attained


@dataclass(frozen=True, slots=True)
class SchedulingPriorities:
    """The priority the scheduler uses for each job of a cycle (its own, aged in aging VCs)."""

    aging: Mapping[str, Aging]
    attained: Mapping[str, float]

    def of(self, job_id: str, virtual_cluster: str, priority: int) -> int:
        aging = self.aging.get(virtual_cluster)
        if aging is None:
            return priority
        return aged_priority(priority, self.attained.get(job_id, 0.0), aging)

    def request(self, job: JobRequest) -> JobRequest:
        """The queued job at its scheduling priority (the same object when unchanged)."""
        priority = self.of(job.job_id, job.virtual_cluster, job.priority)
        return job if priority == job.priority else replace(job, priority=priority)

    def allocation(self, alloc: TaskAllocation) -> TaskAllocation:
        """A running task held at its job's scheduling priority (the same object when
        unchanged)."""
        priority = self.of(alloc.job_id, alloc.virtual_cluster, alloc.priority)
        return alloc if priority == alloc.priority else replace(alloc, priority=priority)


NO_AGING = SchedulingPriorities({}, {})


def scheduling_priorities(session: Session, now: float) -> SchedulingPriorities:
    """What one cycle needs to age its jobs: the aging VCs and the service their jobs had."""
    aging = load_aging(session)
    if not aging:
        return NO_AGING
    return SchedulingPriorities(aging, attained_gpu_seconds(session, now, aging.keys()))
