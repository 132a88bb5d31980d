"""The dashboard's first screen in one call (``GET /api/v1/overview``) and the tasks on a node
(``GET /api/v1/nodes/{name}/tasks``), built from what the node, job and VC views compute
already (node_views, jobs, vcs) and the metrics history. Counts are made in SQL: the cost does
not grow with the number of finished jobs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from shoal.core.nodestates import Hold, Liveness
from shoal.core.quota import Guarantee, sharing
from shoal.core.resources import ResourceVector
from shoal.core.states import State
from shoal.server.admin_schemas import VirtualClusterOut
from shoal.server.auth import Principal
from shoal.server.context import ServerContext
from shoal.server.metrics_schemas import (
    NodeCountsOut,
    NodeTaskOut,
    OverviewOut,
    UsedNowOut,
    VcOverviewOut,
)
from shoal.server.schemas import NodeOut
from shoal.server.services.jobs import jobs_by_state
from shoal.server.services.metrics import require_node
from shoal.server.services.node_views import cluster_load, describe_nodes
from shoal.server.services.nodes import HOLDING
from shoal.server.services.vcs import describe_all
from shoal.store.models import Job, Task

NODE_STATES = (
    Liveness.READY.value,
    Liveness.NOT_READY.value,
    Hold.CORDONED.value,
    Hold.DRAINING.value,
    "DRAINED",
)
_QUEUED = (State.WAITING.value, State.RUNNING.value)
_JOBS_BY_VC = (
    select(Job.virtual_cluster, Job.state, func.count())
    .where(Job.state.in_(_QUEUED))
    .group_by(Job.virtual_cluster, Job.state)
)


def overview(ctx: ServerContext) -> OverviewOut:
    now = ctx.clock()
    nodes = describe_nodes(ctx)
    vcs = describe_all(ctx)
    with ctx.db.read() as session:
        jobs = jobs_by_state(session)
        by_vc: dict[tuple[str, str], int] = {
            (vc, state): int(count) for vc, state, count in session.execute(_JOBS_BY_VC)
        }
    load = cluster_load(nodes)
    at, used = ctx.metrics.latest(now)
    return OverviewOut(
        at=now,
        nodes=_node_counts(nodes),
        capacity=_amounts(load.capacity),
        allocated=_amounts(load.allocated),
        used=UsedNowOut(
            at=at,
            cpu=used["cpuUsed"],
            memoryMiB=used["memoryUsedMiB"],
            gpu=used["gpuUsed"],
            gpuMemoryMiB=used["gpuMemoryUsedMiB"],
            gpuMemoryTotalMiB=used["gpuMemoryTotalMiB"],
        ),
        jobs=jobs,
        cloudPools=ctx.autoscaler is not None,
        virtualClusters=_vc_overviews(vcs, by_vc),
    )


def _amounts(values: tuple[float, float, float]) -> dict[str, float]:
    return dict(zip(("cpu", "memoryMiB", "gpu"), values, strict=True))


def _node_counts(nodes: list[NodeOut]) -> NodeCountsOut:
    counts = dict.fromkeys(NODE_STATES, 0)
    for node in nodes:
        counts[node.state] = counts.get(node.state, 0) + 1
    return NodeCountsOut(total=len(nodes), byState=counts)


def _vector(amounts: dict[str, float]) -> ResourceVector:
    return ResourceVector(
        round(amounts["cpu"] * 1000), round(amounts["memoryMiB"]), round(amounts["gpu"])
    )


def _guarantee(amounts: dict[str, float | None]) -> Guarantee:
    cpu, memory, gpu = amounts["cpu"], amounts["memoryMiB"], amounts["gpu"]
    return (
        None if cpu is None else round(cpu * 1000),
        None if memory is None else round(memory),
        None if gpu is None else round(gpu),
    )


def _out(vector: ResourceVector) -> dict[str, float]:
    return {
        "cpu": vector.cpu_millis / 1000,
        "memoryMiB": float(vector.memory_mib),
        "gpu": float(vector.gpu),
    }


def _vc_overviews(
    vcs: list[VirtualClusterOut], jobs: dict[tuple[str, str], int]
) -> list[VcOverviewOut]:
    shared = sharing(
        {vc.name: _guarantee(vc.guarantee) for vc in vcs},
        {vc.name: _vector(vc.used) for vc in vcs},
    )
    return [
        VcOverviewOut(
            name=vc.name,
            guarantee=vc.guarantee,
            borrowLimit=vc.borrowLimit,
            used=vc.used,
            borrowed=_out(shared[vc.name].borrowed),
            lent=_out(shared[vc.name].lent),
            waitingJobs=jobs.get((vc.name, State.WAITING.value), 0),
            runningJobs=jobs.get((vc.name, State.RUNNING.value), 0),
            members=vc.members,
        )
        for vc in vcs
    ]


# ---- the tasks on a node ----

_ON_NODE = (
    select(Task, Job.name, Job.user, Job.virtual_cluster)
    .join(Job, Job.id == Task.job_id)
    .where(Task.state.in_(HOLDING))
    .order_by(Task.created_at, Task.id)
)


def node_tasks(ctx: ServerContext, caller: Principal, name: str) -> list[NodeTaskOut]:
    """The unfinished tasks placed on the node, oldest first. Everyone sees every task's job,
    owner, resources and ports (the node's load is no secret); the command and pid only of
    the caller's own jobs, or of all for an admin (as ``GET /api/v1/jobs?allUsers`` shows
    other users' jobs as summaries)."""
    with ctx.db.read() as session:
        require_node(session, name)
        rows = session.execute(_ON_NODE.where(Task.node == name)).all()
        own = sorted({t.job_id for t, _, user, _ in rows if caller.is_admin or user == caller.user})
        specs: dict[str, dict[str, Any]] = {}
        if own:  # only their job files are read
            query = select(Job.id, Job.spec).where(Job.id.in_(own))
            specs = dict(session.execute(query).all())
        return [_task_out(t, job, user, vc, specs.get(t.job_id)) for t, job, user, vc in rows]


def _command(spec: dict[str, Any], role: str) -> str | None:
    for entry in spec.get("roles", []):
        if entry.get("name") == role:
            command = entry.get("command")
            return command if isinstance(command, str) else None
    return None


def _task_out(
    task: Task, job_name: str, user: str, vc: str, spec: dict[str, Any] | None
) -> NodeTaskOut:
    return NodeTaskOut(
        jobId=task.job_id,
        jobName=job_name,
        user=user,
        virtualCluster=vc,
        role=task.role,
        index=task.index,
        attempt=task.attempt,
        state=task.state,
        cpu=task.cpu_millis / 1000,
        memoryMiB=task.memory_mib,
        gpus=list(task.gpu_indices),
        ports={label: list(ports) for label, ports in task.ports},
        placedAt=task.created_at,
        startedAt=task.started_at,
        usage=dict(task.usage),
        visible=spec is not None,
        command=None if spec is None else _command(spec, task.role),
        pid=None if spec is None else task.pid,
    )
