"""Load what the scheduler needs from the store into a pure ``ClusterSnapshot``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import ClusterSnapshot, JobRequest, TaskAllocation
from shoal.core.states import State
from shoal.planning import job_request
from shoal.server.context import ServerContext
from shoal.server.services.nodes import HOLDING, load_nodes
from shoal.server.services.vcs import load_virtual_clusters
from shoal.spec.model import JobSpec
from shoal.store.models import Job, Task

_JOB_META = (
    Job.virtual_cluster,
    Job.priority,
    Job.submitted_at,
    Job.user,
    Job.completing,
    Job.stop_requested,
)


def allocation(task: Task, meta: Sequence[Any]) -> TaskAllocation:
    vc, priority, submitted_at, user, completing, stop_requested = meta
    return TaskAllocation(
        job_id=task.job_id,
        role=task.role,
        index=task.index,
        node=task.node,
        resources=ResourceVector(task.cpu_millis, task.memory_mib, len(task.gpu_indices)),
        gpu_indices=tuple(task.gpu_indices),
        ports=tuple(p for _, ports in task.ports for p in ports),
        virtual_cluster=vc,
        priority=priority,
        submitted_at=submitted_at,
        user=user,
        terminating=task.kill_requested or completing is not None or stop_requested,
    )


def spec_of(job: Job) -> JobSpec:
    return JobSpec.model_validate({**job.spec, "secrets": job.secrets})


def request_of(ctx: ServerContext, job: Job) -> JobRequest:
    key = (job.id, job.version)
    cached = ctx.requests.get(key)
    if cached is None:
        cached = _request(job.id, spec_of(job), job)
        ctx.requests[key] = cached
    return cached


def _request(job_id: str, spec: JobSpec, meta: Any) -> JobRequest:
    base = job_request(spec, job_id, meta.submitted_at, meta.virtual_cluster)
    return JobRequest(
        job_id, base.roles, meta.priority, meta.submitted_at, meta.virtual_cluster, meta.user
    )


def load_snapshot(ctx: ServerContext, session: Session) -> tuple[ClusterSnapshot, dict[str, int]]:
    """The snapshot, and the version of each queued job (for guarded writes of the plan).

    Only the columns needed are read; a job's spec is parsed once per version and cached."""
    nodes = load_nodes(session)
    holding = session.execute(
        select(Task, *_JOB_META).join(Job, Job.id == Task.job_id).where(Task.state.in_(HOLDING))
    )
    allocations = tuple(allocation(row[0], row[1:]) for row in holding)
    waiting = session.execute(
        select(
            Job.id, Job.version, Job.priority, Job.submitted_at, Job.virtual_cluster, Job.user
        ).where(Job.state == State.WAITING.value, Job.completing.is_(None))
    ).all()
    missing = [row.id for row in waiting if (row.id, row.version) not in ctx.requests]
    if missing:
        for job in session.scalars(select(Job).where(Job.id.in_(missing))):
            ctx.requests[(job.id, job.version)] = _request(job.id, spec_of(job), job)
    queue = tuple(
        ctx.requests[(row.id, row.version)]
        for row in waiting
        if (row.id, row.version) in ctx.requests
    )
    versions = {row.id: row.version for row in waiting}
    live = {(row.id, row.version) for row in waiting}
    for key in [k for k in ctx.requests if k not in live]:
        del ctx.requests[key]
    vcs = load_virtual_clusters(session)
    return ClusterSnapshot(tuple(nodes), queue, allocations, vcs), versions
