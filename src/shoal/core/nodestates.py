"""The node life cycle: one transition table, like the job and task tables of ``states``.

A node's condition has two independent parts, so an administrator's decision survives an outage:

* liveness, from heartbeats: ``READY``, or ``NOT_READY`` once its agent has been silent longer
  than the node timeout (``shoal server --node-timeout``, 30 s by default);
* a hold, set by an administrator: none, ``CORDONED`` (no new tasks) or ``DRAINING`` (no new
  tasks; the running ones finish, and the node shows ``DRAINED`` once none is left).

The state shown is ``NOT_READY`` while the node is not ready (its hold kept: a draining node
that misses heartbeats is ``NOT_READY``, and ``DRAINING`` again when its agent comes back), else
the hold, else ``READY``. The scheduler places new tasks only on a ready node without a hold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Liveness(StrEnum):
    READY = "READY"
    NOT_READY = "NOT_READY"


class Hold(StrEnum):
    NONE = "NONE"
    CORDONED = "CORDONED"
    DRAINING = "DRAINING"


class NodeEvent(StrEnum):
    HEARTBEATS_MISSED = "heartbeats_missed"  # silent longer than the node timeout
    CAME_BACK = "came_back"  # a NOT_READY node's agent reported again
    # the platform running the node says it is not ready (a Kubernetes Node's Ready condition)
    PLATFORM_NOT_READY = "platform_not_ready"
    CORDON = "cordon"
    DRAIN = "drain"
    UNCORDON = "uncordon"


LIVENESS_EVENTS = frozenset(
    {NodeEvent.HEARTBEATS_MISSED, NodeEvent.CAME_BACK, NodeEvent.PLATFORM_NOT_READY}
)

LIVENESS_TRANSITIONS: dict[tuple[Liveness, NodeEvent], Liveness] = {
    (Liveness.READY, NodeEvent.HEARTBEATS_MISSED): Liveness.NOT_READY,
    (Liveness.READY, NodeEvent.PLATFORM_NOT_READY): Liveness.NOT_READY,
    (Liveness.NOT_READY, NodeEvent.CAME_BACK): Liveness.READY,
}

# Drain includes cordon: a cordoned node may be drained, a draining one is not cordoned again;
# uncordon lifts either hold. Holds may change while the node is NOT_READY.
HOLD_TRANSITIONS: dict[tuple[Hold, NodeEvent], Hold] = {
    (Hold.NONE, NodeEvent.CORDON): Hold.CORDONED,
    (Hold.NONE, NodeEvent.DRAIN): Hold.DRAINING,
    (Hold.CORDONED, NodeEvent.DRAIN): Hold.DRAINING,
    (Hold.CORDONED, NodeEvent.UNCORDON): Hold.NONE,
    (Hold.DRAINING, NodeEvent.UNCORDON): Hold.NONE,
}

_ALREADY: dict[tuple[StrEnum, NodeEvent], str] = {
    (Hold.CORDONED, NodeEvent.CORDON): "is already cordoned",
    (Hold.DRAINING, NodeEvent.CORDON): "is draining, which already keeps new tasks off it",
    (Hold.DRAINING, NodeEvent.DRAIN): "is already draining",
    (Hold.NONE, NodeEvent.UNCORDON): "is neither cordoned nor draining",
    (Liveness.NOT_READY, NodeEvent.HEARTBEATS_MISSED): "is already NOT_READY",
    (Liveness.NOT_READY, NodeEvent.PLATFORM_NOT_READY): "is already NOT_READY",
    (Liveness.READY, NodeEvent.CAME_BACK): "is already READY",
}


class InvalidNodeTransition(Exception):
    """The event changes nothing in this condition (e.g. cordoning a cordoned node)."""

    def __init__(self, node: str, event: NodeEvent, reason: str) -> None:
        super().__init__(f"node {node!r} {reason}: nothing to {event.value.replace('_', ' ')}")
        self.node = node
        self.event = event
        self.reason = reason


@dataclass(frozen=True)
class NodeCondition:
    liveness: Liveness = Liveness.READY
    hold: Hold = Hold.NONE

    @property
    def schedulable(self) -> bool:
        """May the scheduler place new tasks on it?"""
        return self.liveness is Liveness.READY and self.hold is Hold.NONE

    def shown(self, active_tasks: int) -> str:
        """The one state name users see (``DRAINED``: draining with no task left)."""
        if self.liveness is Liveness.NOT_READY:
            return Liveness.NOT_READY.value
        if self.hold is Hold.DRAINING and active_tasks == 0:
            return "DRAINED"
        if self.hold is not Hold.NONE:
            return self.hold.value
        return Liveness.READY.value


def advance_node(name: str, condition: NodeCondition, event: NodeEvent) -> NodeCondition:
    """The condition after ``event``; ``InvalidNodeTransition`` if the table has no such move."""
    if event in LIVENESS_EVENTS:
        liveness = LIVENESS_TRANSITIONS.get((condition.liveness, event))
        if liveness is None:
            raise InvalidNodeTransition(name, event, _ALREADY[(condition.liveness, event)])
        return replace(condition, liveness=liveness)
    hold = HOLD_TRANSITIONS.get((condition.hold, event))
    if hold is None:
        raise InvalidNodeTransition(name, event, _ALREADY[(condition.hold, event)])
    return replace(condition, hold=hold)
