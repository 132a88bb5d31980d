"""Health, version, cluster status and nodes."""

from __future__ import annotations

from fastapi import APIRouter

from shoal import __version__
from shoal.server.deps import Caller, Context
from shoal.server.schemas import ClusterStatus, NodeOut
from shoal.server.services.jobs import jobs_by_state
from shoal.server.services.node_views import cluster_load, describe_nodes

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
    load = cluster_load(nodes)
    keys = ("cpus", "memoryMiB", "gpus")
    totals = {"nodes": float(load.nodes), **dict(zip(keys, load.capacity, strict=True))}
    allocated = dict(zip(keys, load.allocated, strict=True))
    with ctx.db.read() as session:
        jobs = jobs_by_state(session)
    return ClusterStatus(
        url=ctx.settings.url,
        version=__version__,
        nodes=nodes,
        totals=totals,
        allocated=allocated,
        jobs=jobs,
        proxyPort=ctx.proxy_port,
    )
