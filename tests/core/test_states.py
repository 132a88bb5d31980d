"""Job and task life cycles: the transition tables are the whole truth, and nothing else moves."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from shoal.core.states import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    TERMINAL,
    InvalidTransition,
    JobEvent,
    State,
    TaskEvent,
    advance_job,
    advance_task,
)

ALL_JOB_PAIRS = list(itertools.product(State, JobEvent))
ALL_TASK_PAIRS = list(itertools.product(State, TaskEvent))
JOB_MISSING = [pair for pair in ALL_JOB_PAIRS if pair not in JOB_TRANSITIONS]
TASK_MISSING = [pair for pair in ALL_TASK_PAIRS if pair not in TASK_TRANSITIONS]


def _allowed(table: Mapping[tuple[State, Any], State]) -> list[Any]:
    return [pytest.param(s, e, t, id=f"{s}-{e}") for (s, e), t in table.items()]


def _missing(pairs: list[tuple[State, Any]]) -> list[Any]:
    return [pytest.param(s, e, id=f"{s}-{e}") for s, e in pairs]


def test_enumeration_covers_every_pair() -> None:
    # The parametrized tests below cover exactly the product of states and events: a pair is either
    # allowed (in the table) or must raise; there is no third kind.
    assert len(JOB_MISSING) + len(JOB_TRANSITIONS) == len(State) * len(JobEvent)
    assert len(TASK_MISSING) + len(TASK_TRANSITIONS) == len(State) * len(TaskEvent)
    assert all(isinstance(s, State) and isinstance(e, JobEvent) for s, e in JOB_TRANSITIONS)
    assert all(isinstance(s, State) and isinstance(e, TaskEvent) for s, e in TASK_TRANSITIONS)


@pytest.mark.parametrize(("state", "event", "target"), _allowed(JOB_TRANSITIONS))
def test_allowed_job_transition(state: State, event: JobEvent, target: State) -> None:
    result = advance_job(state, event)
    assert result is target
    assert isinstance(result, State)


@pytest.mark.parametrize(("state", "event", "target"), _allowed(TASK_TRANSITIONS))
def test_allowed_task_transition(state: State, event: TaskEvent, target: State) -> None:
    result = advance_task(state, event)
    assert result is target
    assert isinstance(result, State)


@pytest.mark.parametrize(("state", "event"), _missing(JOB_MISSING))
def test_unlisted_job_transition_raises(state: State, event: JobEvent) -> None:
    with pytest.raises(InvalidTransition) as raised:
        advance_job(state, event)
    assert raised.value.state is state
    assert raised.value.event is event
    message = str(raised.value)
    assert message.startswith(f"job cannot go from {state.value} on event")
    assert event.value in message


@pytest.mark.parametrize(("state", "event"), _missing(TASK_MISSING))
def test_unlisted_task_transition_raises(state: State, event: TaskEvent) -> None:
    with pytest.raises(InvalidTransition) as raised:
        advance_task(state, event)
    assert raised.value.state is state
    assert raised.value.event is event
    message = str(raised.value)
    assert message.startswith(f"task cannot go from {state.value} on event")
    assert event.value in message


def test_terminal_states() -> None:
    assert {s for s in State if s.is_terminal} == {State.SUCCEEDED, State.FAILED, State.STOPPED}
    assert {s for s in State if s.is_terminal} == TERMINAL


@pytest.mark.parametrize("state", sorted(TERMINAL), ids=str)
def test_terminal_job_state_has_one_way_out_an_explicit_restart(state: State) -> None:
    assert [event for (s, event) in JOB_TRANSITIONS if s is state] == [JobEvent.RESTARTED]
    assert advance_job(state, JobEvent.RESTARTED) is State.WAITING
    for event in set(JobEvent) - {JobEvent.RESTARTED}:
        with pytest.raises(InvalidTransition):
            advance_job(state, event)


@pytest.mark.parametrize(
    "state",
    [
        State.FAILED,
        State.SUCCEEDED,
        State.STOPPED,
    ],
    ids=str,
)
def test_terminal_task_state_has_no_way_out(state: State) -> None:
    assert not [event for (s, event) in TASK_TRANSITIONS if s is state]
    for event in TaskEvent:
        with pytest.raises(InvalidTransition):
            advance_task(state, event)


def _reachable(start: State, table: Mapping[tuple[State, object], State]) -> set[State]:
    seen, todo = {start}, deque([start])
    while todo:
        state = todo.popleft()
        for (source, _), target in table.items():
            if source is state and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("table", [JOB_TRANSITIONS, TASK_TRANSITIONS], ids=["job", "task"])
def test_every_state_is_reachable_and_every_live_state_can_finish(
    table: Mapping[tuple[State, object], State],
) -> None:
    assert _reachable(State.WAITING, table) == set(State)
    for state in set(State) - TERMINAL:
        assert _reachable(state, table) & TERMINAL, f"{state} can never finish"


@pytest.mark.parametrize(
    ("advance", "start", "events", "end"),
    [
        (advance_job, State.WAITING, ["admitted", "succeeded"], State.SUCCEEDED),
        (advance_job, State.WAITING, ["admitted", "failed"], State.FAILED),
        (advance_job, State.WAITING, ["stop_requested"], State.STOPPED),
        (advance_job, State.WAITING, ["rejected"], State.FAILED),
        (
            advance_job,
            State.WAITING,
            ["admitted", "stop_requested", "stop_requested", "stopped"],
            State.STOPPED,
        ),
        (advance_job, State.WAITING, ["admitted", "preempted", "admitted"], State.RUNNING),
        (
            advance_job,
            State.WAITING,
            ["admitted", "retried", "admitted", "succeeded"],
            State.SUCCEEDED,
        ),
        (advance_task, State.WAITING, ["launched", "succeeded"], State.SUCCEEDED),
        (advance_task, State.WAITING, ["launched", "retried", "launched"], State.RUNNING),
        (advance_task, State.WAITING, ["launched", "stop_requested", "stopped"], State.STOPPED),
        (advance_task, State.WAITING, ["launched", "stopped"], State.STOPPED),  # agent shutdown
        # asked to stop, but it exited on its own before the signal reached it: its own outcome
        (advance_task, State.WAITING, ["launched", "stop_requested", "succeeded"], State.SUCCEEDED),
        (advance_task, State.WAITING, ["launched", "stop_requested", "failed"], State.FAILED),
    ],
)
def test_life_cycles(
    advance: Callable[[State, object], State], start: State, events: list[str], end: State
) -> None:
    event_type = JobEvent if advance is advance_job else TaskEvent
    state = start
    for event in events:
        state = advance(state, event_type(event))
    assert state is end


@pytest.mark.parametrize(
    ("advance", "state", "event"),
    [
        (advance_job, State.WAITING, JobEvent.SUCCEEDED),  # never ran
        (advance_job, State.SUCCEEDED, JobEvent.ADMITTED),  # finished jobs do not restart
        (advance_job, State.STOPPING, JobEvent.ADMITTED),
        (advance_job, State.FAILED, JobEvent.RETRIED),  # job retries happen while RUNNING
        (advance_task, State.WAITING, TaskEvent.SUCCEEDED),
        (advance_task, State.STOPPED, TaskEvent.LAUNCHED),
    ],
)
def test_selected_illegal_moves(
    advance: Callable[[State, object], State], state: State, event: object
) -> None:
    with pytest.raises(InvalidTransition):
        advance(state, event)
