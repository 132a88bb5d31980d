"""Node metrics (docs/metrics.md): recorded from the agents' reports into the server's bounded
history (``ctx.metrics``, server/metrics_history.py) and read back as series for the
dashboard's charts and the CLI."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.nodestates import Liveness
from shoal.protocol import ReportRequest
from shoal.server.context import ApiError, ServerContext
from shoal.server.metrics_history import NodeLoad, Series
from shoal.server.metrics_schemas import (
    ClusterMetricsOut,
    ClusterSeriesOut,
    GpuOut,
    GpuSeriesOut,
    NodeMetricsOut,
    NodeSeriesOut,
)
from shoal.server.schemas import NodeOut
from shoal.server.services.node_views import describe_nodes
from shoal.store.models import Node

DEFAULT_SPAN_S = 3600.0  # a series without ``since`` covers the last hour


def record_report(ctx: ServerContext, request: ReportRequest) -> None:
    """Add a report's node figures to the history, at the server's time. The first report of
    each 10 s bucket also reads every node's capacity and reservations (one read of the nodes
    and their unfinished tasks) for the bucket that ends and the one that starts, and forgets
    the nodes removed since."""
    now = ctx.clock()
    history = ctx.metrics
    if history.begin(now):
        nodes = describe_nodes(ctx)
        history.retain({n.name for n in nodes})
        history.turn(now, [_load(n) for n in nodes])
    _record_figures(ctx, request, now)


def record_report_from_memory(ctx: ServerContext, request: ReportRequest) -> bool:
    """``record_report`` when it needs no read of the store (on the event loop); False, having
    recorded nothing, when this report opens a bucket (``record_report`` in a thread then)."""
    now = ctx.clock()
    if ctx.metrics.turning(now):
        return False
    _record_figures(ctx, request, now)
    return True


def _record_figures(ctx: ServerContext, request: ReportRequest, now: float) -> None:
    for node in request.nodes:
        if node.metrics is not None:
            ctx.metrics.record(node.name, now, node.metrics)


def _load(node: NodeOut) -> NodeLoad:
    capacity = None
    if node.state != Liveness.NOT_READY.value:
        capacity = (node.cpus, float(node.memoryMiB), float(node.gpus))
    held = node.allocated
    allocated = (held.get("cpus", 0.0), held.get("memoryMiB", 0.0), held.get("gpus", 0.0))
    return NodeLoad(node.name, capacity, allocated)


def since_of(since: float | None, now: float) -> float:
    """``since`` as epoch seconds: None is an hour ago; a negative number is that many seconds
    before now (the server's now: a page need not trust its own clock)."""
    if since is None:
        return now - DEFAULT_SPAN_S
    if since < 0:
        return now + since
    return min(since, now)


def cluster_metrics(
    ctx: ServerContext, since: float | None, step: float | None
) -> ClusterMetricsOut:
    now = ctx.clock()
    series = ctx.metrics.cluster(since_of(since, now), now, step)
    return ClusterMetricsOut(
        since=_first(series, now),
        until=now,
        step=series.step,
        t=series.t,
        series=ClusterSeriesOut(**series.columns),
    )


def node_metrics(
    ctx: ServerContext, name: str, since: float | None, step: float | None
) -> NodeMetricsOut:
    """A node's series; 404 for a node the cluster does not have (a removed one included)."""
    with ctx.db.read() as session:
        if session.scalar(select(Node.name).where(Node.name == name)) is None:
            raise ApiError(
                404, "NoNodeError", f"node {name!r} does not exist; see `shoal node list`"
            )
    now = ctx.clock()
    series = ctx.metrics.node(name, since_of(since, now), now, step)
    return NodeMetricsOut(
        node=name,
        since=_first(series, now),
        until=now,
        step=series.step,
        t=series.t,
        series=NodeSeriesOut(**series.columns),
        gpus=[
            GpuOut(index=index, series=GpuSeriesOut(**columns))
            for index, columns in series.gpus.items()
        ],
    )


def require_node(session: Session, name: str) -> None:
    """404 for a node the cluster does not have (a removed one included)."""
    if session.scalar(select(Node.name).where(Node.name == name)) is None:
        raise ApiError(404, "NoNodeError", f"node {name!r} does not exist; see `shoal node list`")


def _first(series: Series, now: float) -> float:
    return series.t[0] if series.t else now
