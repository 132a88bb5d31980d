"""Node state changes (shoal.core.nodestates decides them) and the node event log: what agents'
reports, the scheduler's silent-node check and the autoscaler change. ``node_life.py`` adds the
admins' requests (cordon, drain, uncordon, the event list)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shoal.core.nodestates import Hold, Liveness, NodeCondition, NodeEvent, advance_node
from shoal.server.services.nodes import HOLDING
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
