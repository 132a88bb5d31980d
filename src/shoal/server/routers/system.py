"""Health, version, cluster status and nodes."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import func, select

from shoal import __version__
from shoal.core.nodestates import Liveness
from shoal.core.states import State
from shoal.server.deps import Caller, Context
from shoal.server.schemas import ClusterStatus, NodeOut
from shoal.server.services.node_life import condition_of
from shoal.server.services.nodes import HOLDING
from shoal.store.models import Job, Node, Task

router = APIRouter(tags=["system"])


@router.get("/api/v1/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/api/v1/version")
def version() -> dict[str, str]:
    return {"version": __version__}


def _node_out(n: Node, used: list[float]) -> NodeOut:
    condition = condition_of(n)
    return NodeOut(
        name=n.name,
        address=n.address,
        state=condition.shown(int(used[3])),
        hold=condition.hold.value,
        schedulable=condition.schedulable,
        tasks=int(used[3]),
        agentVersion=n.agent_version,
        cpus=n.cpu_millis / 1000,
        memoryMiB=n.memory_mib,
        gpus=len(n.gpu_indices),
        gpuType=n.gpu_type,
        allocated=dict(zip(("cpus", "memoryMiB", "gpus"), used[:3], strict=True)),
        lastSeen=n.last_seen,
        usage=dict(n.usage),
        busyPorts=list(n.busy_ports or ()),
        labels=dict(n.labels or {}),
    )


def _nodes(ctx: Context, name: str | None = None) -> list[NodeOut]:
    query = select(Node).order_by(Node.name)
    if name is not None:
        query = query.where(Node.name == name)
    with ctx.db.read() as session:
        used: dict[str, list[float]] = {}  # cpus, memory, gpus, tasks
        for task in session.scalars(select(Task).where(Task.state.in_(HOLDING))):
            slot = used.setdefault(task.node, [0, 0, 0, 0])
            slot[0] += task.cpu_millis / 1000
            slot[1] += task.memory_mib
            slot[2] += len(task.gpu_indices)
            slot[3] += 1
        return [_node_out(n, used.get(n.name, [0, 0, 0, 0])) for n in session.scalars(query)]


def node_out(ctx: Context, name: str) -> NodeOut:
    return _nodes(ctx, name)[0]


@router.get("/api/v1/nodes", response_model=list[NodeOut])
def list_nodes(ctx: Context, caller: Caller) -> list[NodeOut]:
    return _nodes(ctx)


@router.get("/api/v1/cluster", response_model=ClusterStatus)
def cluster_status(ctx: Context, caller: Caller) -> ClusterStatus:
    nodes = _nodes(ctx)
    ready = [n for n in nodes if n.state != Liveness.NOT_READY.value]
    totals = {
        "nodes": float(len(ready)),
        "cpus": sum(n.cpus for n in ready),
        "memoryMiB": float(sum(n.memoryMiB for n in ready)),
        "gpus": float(sum(n.gpus for n in ready)),
    }
    allocated = {
        k: sum(n.allocated.get(k, 0.0) for n in ready) for k in ("cpus", "memoryMiB", "gpus")
    }
    with ctx.db.read() as session:
        # read from ix_jobs_state alone; an array counts as its parent and its elements
        counts = dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all())
    jobs = {s.value: int(counts.get(s.value, 0)) for s in State}
    return ClusterStatus(
        url=ctx.settings.url,
        version=__version__,
        nodes=nodes,
        totals=totals,
        allocated=allocated,
        jobs=jobs,
    )
