"""Load what the scheduler needs from the store into a pure ``ClusterSnapshot``."""

from __future__ import annotations

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


def allocation(task: Task, job: Job) -> TaskAllocation:
    return TaskAllocation(
        job_id=task.job_id,
        role=task.role,
        index=task.index,
        node=task.node,
        resources=ResourceVector(task.cpu_millis, task.memory_mib, len(task.gpu_indices)),
        gpu_indices=tuple(task.gpu_indices),
        ports=tuple(p for _, ports in task.ports for p in ports),
        virtual_cluster=job.virtual_cluster,
        priority=job.priority,
        submitted_at=job.submitted_at,
        user=job.user,
        terminating=task.kill_requested or job.completing is not None or job.stop_requested,
    )


def spec_of(job: Job) -> JobSpec:
    return JobSpec.model_validate({**job.spec, "secrets": job.secrets})


def request_of(ctx: ServerContext, job: Job) -> JobRequest:
    key = (job.id, job.version)
    cached = ctx.requests.get(key)
    if cached is None:
        cached = job_request(spec_of(job), job.id, job.submitted_at, job.virtual_cluster)
        cached = JobRequest(
            cached.job_id,
            cached.roles,
            job.priority,
            job.submitted_at,
            job.virtual_cluster,
            job.user,
        )
        ctx.requests[key] = cached
    return cached


def load_snapshot(ctx: ServerContext, session: Session) -> tuple[ClusterSnapshot, dict[str, int]]:
    """The snapshot, and the version of each queued job (for guarded writes of the plan)."""
    nodes = load_nodes(session)
    holding = session.execute(
        select(Task, Job).join(Job, Job.id == Task.job_id).where(Task.state.in_(HOLDING))
    )
    allocations = tuple(allocation(task, job) for task, job in holding)
    waiting = session.scalars(
        select(Job).where(Job.state == State.WAITING.value, Job.completing.is_(None))
    ).all()
    queue = tuple(request_of(ctx, job) for job in waiting)
    versions = {job.id: job.version for job in waiting}
    live = {(j.id, j.version) for j in waiting}
    for key in [k for k in ctx.requests if k not in live]:
        del ctx.requests[key]
    vcs = load_virtual_clusters(session)
    return ClusterSnapshot(tuple(nodes), queue, allocations, vcs), versions
