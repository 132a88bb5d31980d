"""The rules of job arrays: the parent's state from its elements', its way through the job state
machine, how many held elements the cap lets go, and the array variables of the env contract."""

from __future__ import annotations

import pytest

from shoal.core.arrays import (
    ElementCounts,
    FirstFailure,
    held_at_submission,
    parent_end,
    parent_events,
    parent_state,
    summary,
    to_release,
)
from shoal.core.envcontract import EnvArray, JobEnvironment
from shoal.core.lifecycle import ExitClass
from shoal.core.states import JobEvent, State, advance_job
from shoal.planning import dry_run, env_job, simulated_nodes
from shoal.spec.model import JobSpec, TaskRoleSpec

W, R, S = State.WAITING, State.RUNNING, State.STOPPING
OK, BAD, OFF = State.SUCCEEDED, State.FAILED, State.STOPPED


def counts(held: int = 0, **by_name: int) -> ElementCounts:
    return ElementCounts({State(name): n for name, n in by_name.items()}, held)


@pytest.mark.parametrize(
    ("elements", "stopped", "launched", "expected"),
    [
        (counts(WAITING=10, held=8), False, False, W),  # nothing admitted yet
        (counts(WAITING=8, RUNNING=2, held=8), False, True, R),
        (counts(WAITING=5, SUCCEEDED=5), False, True, R),
        (counts(WAITING=10), False, True, R),  # preempted back to the queue: still running
        (counts(RUNNING=2, STOPPED=8), True, True, S),  # stopped as a whole, 2 still exiting
        (counts(SUCCEEDED=10), False, True, OK),
        (counts(SUCCEEDED=9, FAILED=1), False, True, BAD),
        (counts(SUCCEEDED=8, FAILED=1, STOPPED=1), False, True, BAD),  # the worst outcome wins
        (counts(SUCCEEDED=9, STOPPED=1), False, True, OFF),  # one stopped on its own
        (counts(SUCCEEDED=3, FAILED=2, STOPPED=5), True, True, OFF),  # stopped as a whole
        (counts(STOPPED=10), True, False, OFF),  # stopped before anything ran
    ],
)
def test_parent_state_follows_its_elements(
    elements: ElementCounts, stopped: bool, launched: bool, expected: State
) -> None:
    assert parent_state(elements, stopped, launched) is expected


@pytest.mark.parametrize(
    ("current", "target", "events"),
    [
        (W, W, ()),
        (W, R, (JobEvent.ADMITTED,)),
        (W, OFF, (JobEvent.STOP_REQUESTED,)),
        (W, OK, (JobEvent.ADMITTED, JobEvent.SUCCEEDED)),
        (W, S, (JobEvent.ADMITTED, JobEvent.STOP_REQUESTED)),
        (R, BAD, (JobEvent.FAILED,)),
        (S, OFF, (JobEvent.STOPPED,)),
    ],
)
def test_parent_events_walk_the_job_state_machine(
    current: State, target: State, events: tuple[JobEvent, ...]
) -> None:
    assert parent_events(current, target) == events
    state = current
    for event in events:
        state = advance_job(state, event)
    assert state is target


@pytest.mark.parametrize(("current", "target"), [(R, W), (OK, R), (S, OK)])
def test_a_parent_never_goes_back_nor_out_of_a_final_state(current: State, target: State) -> None:
    with pytest.raises(ValueError, match="no way from"):
        parent_events(current, target)


@pytest.mark.parametrize(
    ("cap", "elements", "released"),
    [
        (3, counts(WAITING=10, held=7, RUNNING=0), 0),  # 3 under way (waiting, not held)
        (3, counts(WAITING=9, held=7, SUCCEEDED=1), 1),  # one ended: one goes
        (3, counts(WAITING=7, held=7, RUNNING=1, SUCCEEDED=2), 2),
        (3, counts(WAITING=1, held=1, SUCCEEDED=9), 1),  # fewer held than room
        (3, counts(SUCCEEDED=10), 0),
        (None, counts(WAITING=4, held=4), 4),  # no cap: nothing stays held
        (2, counts(WAITING=3, held=3, RUNNING=5), 0),  # over the cap: nothing goes
    ],
)
def test_the_cap_releases_what_room_there_is(
    cap: int | None, elements: ElementCounts, released: int
) -> None:
    assert to_release(cap, elements) == released


def test_elements_past_the_cap_start_held() -> None:
    assert held_at_submission(1000, 50) == 950
    assert held_at_submission(10, 50) == 0
    assert held_at_submission(10, None) == 0


def test_a_failed_array_ends_with_its_first_failed_element() -> None:
    failure = FirstFailure("7_3", 3, ExitClass.USER_FAILURE, 2, "exit code 2")
    end = parent_end(counts(SUCCEEDED=8, FAILED=2), None, failure)
    assert (end.state, end.exit_class, end.exit_code) == (BAD, ExitClass.USER_FAILURE, 2)
    assert end.diagnostics.startswith("2 of 10 elements failed (first: element 3 (job 7_3)")
    stopped = parent_end(counts(SUCCEEDED=1, STOPPED=9), "stopped by ann", None)
    assert (stopped.state, stopped.exit_code) == (OFF, -210)
    assert stopped.diagnostics == "stopped by ann; 10 elements: 1 succeeded, 9 stopped"
    assert parent_end(counts(SUCCEEDED=4), None, None).exit_code == 0


def test_summary_counts_each_state_once() -> None:
    text = summary(counts(WAITING=930, held=900, RUNNING=20, SUCCEEDED=50))
    assert text == "1000 elements: 20 running, 30 waiting, 900 held, 50 succeeded"


def test_array_elements_see_their_index_and_slurms_variables() -> None:
    spec = JobSpec(name="sweep", roles=(TaskRoleSpec(name="w", command="true"),))
    job = env_job(spec, "7_3", "ann", array=EnvArray("7", 3, size=10, first=0, last=18))
    env = dry_run(spec, simulated_nodes(1, 2, 1024, 0)).environment
    assert env is not None

    task = JobEnvironment(job, env.placements).for_task("w", 0)
    assert task["SHOAL_ARRAY_INDEX"] == task["SLURM_ARRAY_TASK_ID"] == "3"
    assert task["SHOAL_ARRAY_JOB_ID"] == task["SLURM_ARRAY_JOB_ID"] == "7"
    assert task["SHOAL_JOB_ID"] == "7_3"
    assert (task["SHOAL_ARRAY_SIZE"], task["SLURM_ARRAY_TASK_COUNT"]) == ("10", "10")
    assert (task["SLURM_ARRAY_TASK_MIN"], task["SLURM_ARRAY_TASK_MAX"]) == ("0", "18")
    plain = JobEnvironment(env_job(spec, "8", "ann"), env.placements).for_task("w", 0)
    assert not [name for name in plain if "ARRAY" in name]
