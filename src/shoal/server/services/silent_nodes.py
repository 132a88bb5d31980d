"""Agents that fall silent: their nodes go NOT_READY and their tasks are lost (checked by the
scheduler loop before each cycle, in the API's process or the scheduler's own)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.lifecycle import ProcessExit
from shoal.core.nodestates import NodeEvent
from shoal.core.states import State
from shoal.server.context import ServerContext
from shoal.server.notify import noted_news
from shoal.server.services.lifecycle import on_exit
from shoal.server.services.node_changes import change_node, record_node_event
from shoal.store.models import Node, NodeCertRow, Task

ACTIVE_TASK = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)
LOST = "its tasks are lost"
# A node whose tasks nothing stops when its agent falls silent (docs/kubernetes.md, "Never two
# attempts"): they may still run, so none is started again until the agent confirms it ended.
KEPT = "its tasks may still run: they end when its agent confirms they did"


def lose_silent_nodes(ctx: ServerContext) -> bool:
    """Nodes whose agent has been silent too long are NOT_READY; their tasks are lost."""
    now = ctx.clock()
    cutoff = now - ctx.settings.node_timeout_s
    changed = False
    with ctx.db.read() as session:  # the common case, nobody is late, needs no write
        late = session.scalar(
            select(Node.name).where(Node.state == "READY", Node.last_seen < cutoff).limit(1)
        )
    if late is None:
        return False
    lost: list[str] = []
    with ctx.db.write() as session:
        if ctx.scheduler_lease is not None:  # a scheduler paused past its lease decides nothing
            ctx.scheduler_lease.check(session)
        for node in session.scalars(
            select(Node).where(Node.state == "READY", Node.last_seen < cutoff)
        ):
            timeout = ctx.settings.node_timeout_s
            changed = True
            if node.fencing == "confirmed":  # nothing stops its tasks (Kubernetes Pods): keep them
                change_node(
                    session, node, NodeEvent.HEARTBEATS_MISSED, now, timeout_s=timeout, why=KEPT
                )
                continue
            change_node(
                session, node, NodeEvent.HEARTBEATS_MISSED, now, timeout_s=timeout, why=LOST
            )
            node.epoch += 1  # reports about attempts launched before this are stale from now on
            lost.append(node.name)
            for task in session.scalars(
                select(Task).where(Task.node == node.name, Task.state.in_(ACTIVE_TASK))
            ):
                on_exit(session, task, ProcessExit(None, lost=True), now)
        delete_removed_nodes(session, lost, now)  # `node remove --force` waited for this
    ctx.wake_agents(noted_news(session))  # the lost tasks' peers on other nodes are killed
    return changed


def delete_removed_nodes(session: Session, names: list[str], now: float) -> None:
    """Delete the nodes among ``names`` (just gone NOT_READY) whose every certificate is revoked:
    a ``node remove --force`` waiting for fencing to end their tasks."""
    for name in names:
        certs = list(session.scalars(select(NodeCertRow).where(NodeCertRow.node == name)))
        if certs and all(c.revoked_at is not None for c in certs):
            node = session.get(Node, name)
            if node is not None:
                session.delete(node)
            record_node_event(session, name, now, "removed", "removed; its tasks ended as lost")


LEFT_AND_FORGOTTEN = (
    "forgotten: it left the Kubernetes cluster (deleted, or no longer matched by the agent's "
    "--node-selector) and no task of shoal's is on it any more"
)


def forget_left_nodes(session: Session, agent_id: str, listed: list[str], now: float) -> bool:
    """Delete the nodes of a Kubernetes agent (``fencing: confirmed``) that its report no longer
    lists, once no task is active on them: a Node gone from the cluster (an autoscaled pool's
    come and go) does not stay in ``node list`` for ever. A node still holding tasks waits for
    them to end (their Pods may still run); its events stay. True if any was deleted."""
    left = session.scalars(
        select(Node).where(
            Node.agent_id == agent_id,
            Node.fencing == "confirmed",
            Node.state != "READY",
            Node.name.not_in(listed),
        )
    )
    forgotten = False
    for node in list(left):
        busy = session.scalar(
            select(Task.id).where(Task.node == node.name, Task.state.in_(ACTIVE_TASK)).limit(1)
        )
        if busy is None:
            session.delete(node)
            record_node_event(session, node.name, now, "removed", LEFT_AND_FORGOTTEN)
            forgotten = True
    return forgotten
