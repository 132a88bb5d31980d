"""The node life cycle table (shoal.core.nodestates): every move it lists, every no-op refused,
and the hold surviving an outage."""

from __future__ import annotations

import pytest

from shoal.core.nodestates import (
    HOLD_TRANSITIONS,
    LIVENESS_TRANSITIONS,
    Hold,
    InvalidNodeTransition,
    Liveness,
    NodeCondition,
    NodeEvent,
    advance_node,
)

# (liveness, hold, event) -> (liveness, hold) after it, or None: refused as a no-op
TABLE = [
    (Liveness.READY, Hold.NONE, NodeEvent.CORDON, (Liveness.READY, Hold.CORDONED)),
    (Liveness.READY, Hold.NONE, NodeEvent.DRAIN, (Liveness.READY, Hold.DRAINING)),
    (Liveness.READY, Hold.NONE, NodeEvent.UNCORDON, None),
    (Liveness.READY, Hold.CORDONED, NodeEvent.CORDON, None),
    (Liveness.READY, Hold.CORDONED, NodeEvent.DRAIN, (Liveness.READY, Hold.DRAINING)),
    (Liveness.READY, Hold.CORDONED, NodeEvent.UNCORDON, (Liveness.READY, Hold.NONE)),
    (Liveness.READY, Hold.DRAINING, NodeEvent.CORDON, None),
    (Liveness.READY, Hold.DRAINING, NodeEvent.DRAIN, None),
    (Liveness.READY, Hold.DRAINING, NodeEvent.UNCORDON, (Liveness.READY, Hold.NONE)),
    (Liveness.READY, Hold.NONE, NodeEvent.HEARTBEATS_MISSED, (Liveness.NOT_READY, Hold.NONE)),
    (Liveness.READY, Hold.NONE, NodeEvent.CAME_BACK, None),
    (Liveness.NOT_READY, Hold.NONE, NodeEvent.HEARTBEATS_MISSED, None),
    (Liveness.NOT_READY, Hold.DRAINING, NodeEvent.CAME_BACK, (Liveness.READY, Hold.DRAINING)),
    (
        Liveness.READY,
        Hold.DRAINING,
        NodeEvent.HEARTBEATS_MISSED,
        (Liveness.NOT_READY, Hold.DRAINING),
    ),
    (Liveness.NOT_READY, Hold.NONE, NodeEvent.CORDON, (Liveness.NOT_READY, Hold.CORDONED)),
    (Liveness.NOT_READY, Hold.CORDONED, NodeEvent.UNCORDON, (Liveness.NOT_READY, Hold.NONE)),
]


@pytest.mark.parametrize(("liveness", "hold", "event", "after"), TABLE)
def test_the_node_transition_table(
    liveness: Liveness, hold: Hold, event: NodeEvent, after: tuple[Liveness, Hold] | None
) -> None:
    before = NodeCondition(liveness, hold)
    if after is None:
        with pytest.raises(InvalidNodeTransition, match=r"node 'n0' .*: nothing to"):
            advance_node("n0", before, event)
    else:
        assert advance_node("n0", before, event) == NodeCondition(*after)


def test_every_pair_is_either_a_move_or_a_refusal_with_a_reason() -> None:
    for liveness in Liveness:
        for hold in Hold:
            for event in NodeEvent:
                condition = NodeCondition(liveness, hold)
                listed = (liveness, event) in LIVENESS_TRANSITIONS or (
                    hold,
                    event,
                ) in HOLD_TRANSITIONS
                try:
                    advance_node("n0", condition, event)
                except InvalidNodeTransition as exc:
                    assert not listed and exc.reason
                else:
                    assert listed


def test_only_a_ready_node_without_a_hold_is_schedulable() -> None:
    schedulable = {
        (c.liveness, c.hold)
        for c in (NodeCondition(lv, h) for lv in Liveness for h in Hold)
        if c.schedulable
    }
    assert schedulable == {(Liveness.READY, Hold.NONE)}


def test_the_state_shown() -> None:
    assert NodeCondition().shown(3) == "READY"
    assert NodeCondition(hold=Hold.CORDONED).shown(1) == "CORDONED"
    assert NodeCondition(hold=Hold.DRAINING).shown(1) == "DRAINING"
    assert NodeCondition(hold=Hold.DRAINING).shown(0) == "DRAINED"
    assert NodeCondition(Liveness.NOT_READY, Hold.DRAINING).shown(0) == "NOT_READY"
