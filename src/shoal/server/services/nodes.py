"""Nodes as the scheduler sees them, and which task states hold resources."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState
from shoal.core.states import State
from shoal.store.models import Node

HOLDING = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


def node_state(node: Node) -> NodeState:
    return NodeState(
        name=node.name,
        address=node.address,
        capacity=ResourceVector(node.cpu_millis, node.memory_mib, len(node.gpu_indices)),
        gpu_indices=tuple(node.gpu_indices),
        gpu_type=node.gpu_type,
        port_range=(node.port_low, node.port_high),
        schedulable=node.schedulable and node.state == "READY",
    )


def load_nodes(session: Session, include_lost: bool = False) -> list[NodeState]:
    query = select(Node)
    if not include_lost:
        query = query.where(Node.state == "READY")
    return [node_state(n) for n in session.scalars(query)]
