"""Admins' node requests (cordon, drain, uncordon) and the node event log's answer; the state
changes themselves are in ``node_changes.py`` (re-exported here)."""

from __future__ import annotations

from sqlalchemy import select

from shoal.core.nodestates import InvalidNodeTransition, NodeEvent
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import NodeEventOut
from shoal.server.services import audit
from shoal.server.services.node_changes import (
    active_tasks,
    change_node,
    condition_of,
    note_drained,
    record_node_event,
)
from shoal.server.services.users import require_admin
from shoal.store.models import Node, NodeEventRow

# the state changes moved to node_changes.py (which the scheduler process imports alone)
__all__ = ["active_tasks", "change_node", "condition_of", "hold_node", "node_events"]
__all__ += ["note_drained", "record_node_event"]


def hold_node(ctx: ServerContext, caller: Principal, name: str, event: NodeEvent) -> None:
    """Cordon, drain or uncordon a node (admins): 404 for an unknown node, 409 for a no-op."""
    require_admin(caller)
    with ctx.db.write() as session:
        node = session.get(Node, name)
        if node is None:
            known = ", ".join(session.scalars(select(Node.name).order_by(Node.name))) or "none"
            raise ApiError(404, "NoNodeError", f"node {name!r} does not exist (nodes: {known})")
        try:
            change_node(session, node, event, ctx.clock(), by=caller.user)
        except InvalidNodeTransition as exc:
            raise ApiError(409, "NodeStateConflict", str(exc)) from None
        audit.record(session, ctx.clock(), caller, f"node.{event.value}", f"node {name}")
    ctx.wake_scheduler()


def node_events(ctx: ServerContext, name: str) -> list[NodeEventOut]:
    with ctx.db.read() as session:
        query = select(NodeEventRow).where(NodeEventRow.node == name).order_by(NodeEventRow.id)
        events = [
            NodeEventOut(at=e.at, kind=e.kind, message=e.message, by=e.by)
            for e in session.scalars(query)
        ]
        if not events and session.get(Node, name) is None:  # a removed node keeps its history
            raise ApiError(404, "NoNodeError", f"node {name!r} does not exist")
        return events
