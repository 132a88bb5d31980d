"""The cluster at a glance (``/api/v1/overview``), node metrics over time and the tasks on a node
(docs/metrics.md). Every user may read them: node load and the queue are shared knowledge; the
commands of other users' tasks are not (``/nodes/{name}/tasks``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from shoal.server.deps import Caller, Context
from shoal.server.metrics_schemas import (
    ClusterMetricsOut,
    NodeMetricsOut,
    NodeTaskOut,
    OverviewOut,
)
from shoal.server.services import metrics
from shoal.server.services.overview import node_tasks, overview

router = APIRouter(tags=["metrics"])

Since = Annotated[
    float | None,
    Query(
        description="From when (epoch seconds); negative: that many seconds before the "
        "server's now; default: the last hour. The history reaches back a day (docs/metrics.md)."
    ),
]
Step = Annotated[
    float | None,
    Query(
        ge=1,
        le=86400,
        description="Seconds per point, at least (rounded up to whole buckets: 10 s within the "
        "last hour, 5 min beyond); default: one bucket.",
    ),
]


@router.get("/api/v1/overview", response_model=OverviewOut)
def get_overview(ctx: Context, caller: Caller) -> OverviewOut:
    """Capacity, reservations and use now; nodes and jobs by state; each VC's guarantee, use,
    borrowing and queue."""
    return overview(ctx)


@router.get("/api/v1/metrics/cluster", response_model=ClusterMetricsOut)
def cluster_metrics(
    ctx: Context, caller: Caller, since: Since = None, step: Step = None
) -> ClusterMetricsOut:
    """The cluster's capacity, reservations and use over time, as columns."""
    return metrics.cluster_metrics(ctx, since, step)


@router.get("/api/v1/nodes/{name}/metrics", response_model=NodeMetricsOut)
def node_metrics(
    name: str, ctx: Context, caller: Caller, since: Since = None, step: Step = None
) -> NodeMetricsOut:
    """A node's capacity, reservations, its tasks' and its host's use, and each GPU's, over
    time, as columns."""
    return metrics.node_metrics(ctx, name, since, step)


@router.get("/api/v1/nodes/{name}/tasks", response_model=list[NodeTaskOut])
def tasks_on_node(name: str, ctx: Context, caller: Caller) -> list[NodeTaskOut]:
    """The unfinished tasks placed on the node; commands only of the caller's own jobs (every
    job's for admins)."""
    return node_tasks(ctx, caller, name)
