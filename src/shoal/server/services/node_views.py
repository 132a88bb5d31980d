"""Nodes as the API shows them: capacity, what unfinished tasks hold, condition, labels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select

from shoal.core.nodestates import Liveness
from shoal.server.context import ServerContext
from shoal.server.schemas import NodeOut
from shoal.server.services.node_life import condition_of
from shoal.server.services.nodes import HOLDING
from shoal.store.models import Node, Task


def _node_out(n: Node, used: list[float]) -> NodeOut:
    condition = condition_of(n)
    state = condition.shown(int(used[3]))
    if state == Liveness.READY.value and n.platform_hold is not None:
        state = "CORDONED"  # by its platform (a Kubernetes cordon or taint): platformHold says
    return NodeOut(
        name=n.name,
        address=n.address,
        state=state,
        hold=condition.hold.value,
        schedulable=condition.schedulable and n.platform_hold is None,
        platformHold=n.platform_hold,
        fencing=n.fencing,
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
        unsupported=dict(n.unsupported or {}),
    )


# What unfinished tasks hold, as plain rows (no task objects: a busy cluster has thousands).
_HELD = select(Task.node, Task.cpu_millis, Task.memory_mib, Task.gpu_indices).where(
    Task.state.in_(HOLDING)
)


def describe_nodes(ctx: ServerContext, name: str | None = None) -> list[NodeOut]:
    """Every node (or the one named) with what its unfinished tasks hold."""
    query = select(Node).order_by(Node.name)
    if name is not None:
        query = query.where(Node.name == name)
    with ctx.db.read() as session:
        used: dict[str, list[float]] = {}  # cpus, memory, gpus, tasks
        held = _HELD if name is None else _HELD.where(Task.node == name)
        for node, cpu_millis, memory_mib, gpus in session.connection().execute(held):
            slot = used.setdefault(node, [0, 0, 0, 0])
            slot[0] += cpu_millis / 1000
            slot[1] += memory_mib
            slot[2] += len(gpus)
            slot[3] += 1
        return [_node_out(n, used.get(n.name, [0, 0, 0, 0])) for n in session.scalars(query)]


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """What the nodes that are not NOT_READY offer and what tasks reserve on them, as (cpus,
    memory MiB, GPUs)."""

    nodes: int
    capacity: tuple[float, float, float]
    allocated: tuple[float, float, float]


def cluster_load(nodes: Iterable[NodeOut]) -> ClusterLoad:
    counted = [n for n in nodes if n.state != Liveness.NOT_READY.value]
    return ClusterLoad(
        len(counted),
        (
            sum(n.cpus for n in counted),
            float(sum(n.memoryMiB for n in counted)),
            float(sum(n.gpus for n in counted)),
        ),
        (
            sum(n.allocated.get("cpus", 0.0) for n in counted),
            sum(n.allocated.get("memoryMiB", 0.0) for n in counted),
            sum(n.allocated.get("gpus", 0.0) for n in counted),
        ),
    )
