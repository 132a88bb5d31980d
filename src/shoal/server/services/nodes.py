"""Nodes as the scheduler sees them, and which task states hold resources."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState
from shoal.core.states import State
from shoal.store.models import Node

HOLDING = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


_COLUMNS = (
    Node.name,
    Node.address,
    Node.cpu_millis,
    Node.memory_mib,
    Node.gpu_indices,
    Node.gpu_type,
    Node.port_low,
    Node.port_high,
    Node.busy_ports,
    Node.schedulable,
    Node.state,
    Node.platform_hold,
    Node.unsupported,
)


def node_state(node: Node | Any) -> NodeState:
    """A node row (or a row of its columns) as the scheduler sees it."""
    return NodeState(
        name=node.name,
        address=node.address,
        capacity=ResourceVector(node.cpu_millis, node.memory_mib, len(node.gpu_indices)),
        gpu_indices=tuple(node.gpu_indices),
        gpu_type=node.gpu_type,
        port_range=(node.port_low, node.port_high),
        reserved_ports=frozenset(node.busy_ports or ()),  # held by other processes on the host
        # an administrator's hold, liveness, and the platform's own hold (a Kubernetes cordon)
        schedulable=node.schedulable and node.state == "READY" and node.platform_hold is None,
        # what its agent said it cannot do (a role that needs it is not placed here)
        unsupported=tuple(sorted((str(k), str(v)) for k, v in (node.unsupported or {}).items())),
    )


# Built once: a statement object used again skips SQLAlchemy's per-call construction and
# result adaptation (a third of a query's cost here).
_ALL = select(*_COLUMNS)
_READY = _ALL.where(Node.state == "READY")


def load_nodes(session: Session, include_lost: bool = False) -> list[NodeState]:
    query = _ALL if include_lost else _READY
    return [node_state(n) for n in session.connection().execute(query)]
