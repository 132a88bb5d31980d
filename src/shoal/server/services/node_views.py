"""Nodes as the API shows them: capacity, what unfinished tasks hold, condition, labels."""

from __future__ import annotations

from sqlalchemy import select

from shoal.server.context import ServerContext
from shoal.server.schemas import NodeOut
from shoal.server.services.node_life import condition_of
from shoal.server.services.nodes import HOLDING
from shoal.store.models import Node, Task


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
        unsupported=dict(n.unsupported or {}),
    )


def describe_nodes(ctx: ServerContext, name: str | None = None) -> list[NodeOut]:
    """Every node (or the one named) with what its unfinished tasks hold."""
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
