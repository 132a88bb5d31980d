"""Health, version, cluster status and nodes."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import func, select

from shoal import __version__
from shoal.core.nodestates import Liveness
from shoal.core.states import State
from shoal.server.deps import Caller, Context
from shoal.server.schemas import ClusterStatus, NodeOut
from shoal.server.services.node_views import describe_nodes
from shoal.store.models import Job

router = APIRouter(tags=["system"])


@router.get("/api/v1/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/api/v1/version")
def version() -> dict[str, str]:
    return {"version": __version__}


def node_out(ctx: Context, name: str) -> NodeOut:
    return describe_nodes(ctx, name)[0]


@router.get("/api/v1/nodes", response_model=list[NodeOut])
def list_nodes(ctx: Context, caller: Caller) -> list[NodeOut]:
    return describe_nodes(ctx)


@router.get("/api/v1/cluster", response_model=ClusterStatus)
def cluster_status(ctx: Context, caller: Caller) -> ClusterStatus:
    nodes = describe_nodes(ctx)
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
