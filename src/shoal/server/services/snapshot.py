"""Load what the scheduler needs from the store into a pure ``ClusterSnapshot``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import ClusterSnapshot, JobRequest, TaskAllocation
from shoal.core.states import State
from shoal.planning import job_request
from shoal.server.context import ServerContext
from shoal.server.services.attained import scheduling_priorities
from shoal.server.services.nodes import HOLDING, load_nodes
from shoal.server.services.vc_loading import load_virtual_clusters
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
_TASK_COLUMNS = (
    Task.job_id,
    Task.role,
    Task.index,
    Task.node,
    Task.cpu_millis,
    Task.memory_mib,
    Task.gpu_indices,
    Task.ports,
    Task.kill_requested,
)

_HOLDING = (
    select(*_TASK_COLUMNS, *_JOB_META)
    .join(Job, Job.id == Task.job_id)
    .where(Task.state.in_(HOLDING))
)
_WAITING = select(
    Job.id, Job.version, Job.priority, Job.submitted_at, Job.virtual_cluster, Job.user
).where(
    Job.state == State.WAITING.value,
    Job.completing.is_(None),
    Job.array_held.is_(False),  # not an array's parent, nor an element its cap holds back
    Job.missing_image.is_(None),  # not waiting for an image to be pushed (image_holds.py)
)


def allocation(task: Task | Any, meta: Sequence[Any]) -> TaskAllocation:
    """The resources a task holds; ``task`` is a task row or a row of ``_TASK_COLUMNS``."""
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


SPEC_MEMO = 4096  # parsed specs kept per database


def spec_of(job: Job) -> JobSpec:
    """The job's spec, parsed once: a job's spec and secrets never change after submission."""
    session = object_session(job)
    memo = session.info.get("memo") if session is not None else None
    key = ("spec", job.id, job.submitted_at)
    spec = memo.get(key) if memo is not None else None
    if spec is None:
        spec = JobSpec.model_validate({**job.spec, "secrets": job.secrets})
        if memo is not None:
            if len(memo) >= SPEC_MEMO:
                memo.clear()
            memo[key] = spec
    return spec


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


def holding_allocations(session: Session) -> tuple[TaskAllocation, ...]:
    """What every task that holds resources holds (running, starting or stopping)."""
    cut = len(_TASK_COLUMNS)
    rows = session.connection().execute(_HOLDING)
    return tuple(allocation(row, row[cut:]) for row in rows)


def request_for(job: Job) -> JobRequest:
    """The scheduler's view of one stored job (its spec parsed once per session)."""
    return _request(job.id, spec_of(job), job)


def load_snapshot(
    ctx: ServerContext, session: Session, queue_only: bool = False
) -> tuple[ClusterSnapshot, dict[str, int]]:
    """The snapshot, and the version of each queued job (for guarded writes of the plan).

    Only the columns needed are read; a job's spec is parsed once per version and cached. With
    ``queue_only``, an empty queue is answered with an empty snapshot after one query."""
    connection = session.connection()  # plain rows: no ORM objects for a read-only snapshot
    waiting = connection.execute(_WAITING).all()
    live = {(row.id, row.version) for row in waiting}
    for key in [k for k in ctx.requests if k not in live]:
        del ctx.requests[key]
    if queue_only and not waiting:
        return ClusterSnapshot(()), {}
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
    nodes = load_nodes(session)
    cut = len(_TASK_COLUMNS)
    allocations = tuple(allocation(row, row[cut:]) for row in connection.execute(_HOLDING))
    vcs = load_virtual_clusters(session, nodes)
    prices = scheduling_priorities(session, ctx.clock())  # per-VC aging, if any VC has it
    queue = tuple(map(prices.request, queue))
    allocations = tuple(map(prices.allocation, allocations))
    return ClusterSnapshot(tuple(nodes), queue, allocations, vcs), versions
