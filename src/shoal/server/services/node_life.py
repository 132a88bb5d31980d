"""Node state changes (shoal.core.nodestates decides them) and the node event log."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shoal.core.nodestates import (
    Hold,
    InvalidNodeTransition,
    Liveness,
    NodeCondition,
    NodeEvent,
    advance_node,
)
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import NodeEventOut
from shoal.server.services import audit
from shoal.server.services.nodes import HOLDING
from shoal.server.services.users import require_admin
from shoal.store.models import Node, NodeEventRow, Task

_SAY = {
    NodeEvent.HEARTBEATS_MISSED: "NOT_READY: no heartbeat for {timeout:g}s; {tasks}",
    NodeEvent.PLATFORM_NOT_READY: "NOT_READY: {tasks}",
    NodeEvent.CAME_BACK: "ready again: its agent reports",
    NodeEvent.CORDON: "cordoned by {by}: no new tasks",
    NodeEvent.DRAIN: "drained by {by}: no new tasks; {tasks}",
    NodeEvent.UNCORDON: "uncordoned by {by}: takes new tasks",
}


def condition_of(node: Node) -> NodeCondition:
    return NodeCondition(Liveness(node.state), Hold(node.hold or Hold.NONE.value))


def active_tasks(session: Session, node: str) -> int:
    query = select(func.count()).where(Task.node == node, Task.state.in_(HOLDING))
    return int(session.scalar(query) or 0)


def record_node_event(
    session: Session, node: str, at: float, kind: str, message: str, by: str | None = None
) -> None:
    session.add(NodeEventRow(node=node, at=at, kind=kind, message=message, by=by))


def change_node(
    session: Session,
    node: Node,
    event: NodeEvent,
    now: float,
    by: str | None = None,
    timeout_s: float = 0.0,
    why: str = "",
) -> NodeCondition:
    """Apply ``event`` to the node row and record it; raises ``InvalidNodeTransition``.
    ``why``: for a node going NOT_READY, what becomes of its tasks (or what the platform said)."""
    after = advance_node(node.name, condition_of(node), event)
    node.state, node.hold = after.liveness.value, after.hold.value
    node.schedulable = after.hold is Hold.NONE
    tasks = why
    if event is NodeEvent.DRAIN:
        count = active_tasks(session, node.name)
        tasks = f"{count} running task(s) finish first" if count else "no task on it: DRAINED"
    message = _SAY[event].format(by=by, tasks=tasks, timeout=timeout_s)
    record_node_event(session, node.name, now, event.value, message, by)
    return after


def note_drained(session: Session, nodes: set[str], now: float) -> None:
    """Record ``drained`` for each draining node of ``nodes`` that has no task left."""
    for name in sorted(nodes):
        node = session.get(Node, name)
        draining = node is not None and node.hold == Hold.DRAINING.value
        if draining and active_tasks(session, name) == 0:
            record_node_event(session, name, now, "drained", "DRAINED: no task left on it")


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
