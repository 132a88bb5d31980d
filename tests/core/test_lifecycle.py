"""The exit taxonomy, path by path: how each way a task can end sets its class, code, state and
diagnostics, and what that makes of its job. One table row per path; properties over the rest."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.lifecycle import (
    EXIT_CODES,
    ExitClass,
    JobEnd,
    JobVerdict,
    ProcessExit,
    RetryCause,
    RolePolicy,
    StopCause,
    TaskOutcome,
    end_job,
    end_task,
    judge,
    retry_cause,
    should_retry_job,
    should_retry_task,
    stopped_job,
)
from shoal.core.states import State, TaskEvent, advance_task

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ONE = [RolePolicy("w", 1, 1, None)]
TWO = [RolePolicy("w", 2, 1, None)]
SIGTERM = 15


@dataclass(frozen=True)
class Path:
    """A job's tasks (``None``: still running) and what must come of them."""

    policies: list[RolePolicy]
    exits: list[ProcessExit | None]
    task_states: list[State]
    task_classes: list[ExitClass | None]
    task_codes: list[int | None]
    job: JobVerdict
    job_class: ExitClass | None = None
    job_code: int | None = None
    words: str = ""  # in the job's diagnostics
    preempting: bool = False
    max_runtime_s: float | None = None


PATHS = {
    "normal exit 0": Path(
        ONE, [ProcessExit(0)], [State.SUCCEEDED], [ExitClass.SUCCEEDED], [0],
        JobVerdict.SUCCEEDED, ExitClass.SUCCEEDED, 0, "every task finished",
    ),
    "non-zero exit": Path(
        ONE, [ProcessExit(3)], [State.FAILED], [ExitClass.USER_FAILURE], [3],
        JobVerdict.FAILED, ExitClass.USER_FAILURE, 3, "1 instance(s) of role w failed",
    ),
    "killed by a signal it caused": Path(
        ONE, [ProcessExit(None, 9)], [State.FAILED], [ExitClass.USER_FAILURE], [137],
        JobVerdict.FAILED, ExitClass.USER_FAILURE, 137, "role w failed",
    ),
    "a sibling fails, the other still runs: stopped afterwards": Path(
        TWO, [None, ProcessExit(2)], [State.RUNNING, State.FAILED],
        [None, ExitClass.USER_FAILURE], [None, 2],
        JobVerdict.FAILED, ExitClass.USER_FAILURE, 2, "role w failed",
    ),
    "exit 0 right before its sibling's failure decides the job": Path(
        TWO, [ProcessExit(0), ProcessExit(2)], [State.SUCCEEDED, State.FAILED],
        [ExitClass.SUCCEEDED, ExitClass.USER_FAILURE], [0, 2],
        JobVerdict.FAILED, ExitClass.USER_FAILURE, 2, "role w failed",
    ),
    "completion policy: min_succeeded reached while a sibling runs": Path(
        [RolePolicy("w", 2, 1, 1)], [ProcessExit(0), None], [State.SUCCEEDED, State.RUNNING],
        [ExitClass.SUCCEEDED, None], [0, None],
        JobVerdict.SUCCEEDED, ExitClass.SUCCEEDED, 0, "succeeds the job at 1",
    ),
    "preemption": Path(
        ONE, [ProcessExit(None, SIGTERM, stop_requested=True)], [State.STOPPED],
        [ExitClass.PREEMPTED], [EXIT_CODES[ExitClass.PREEMPTED]],
        JobVerdict.STOPPED, ExitClass.STOPPED, -210, preempting=True,
    ),
    "timeout": Path(
        TWO, [ProcessExit(None, SIGTERM, timed_out=True), None], [State.FAILED, State.RUNNING],
        [ExitClass.TIMEOUT, None], [-220],
        JobVerdict.FAILED, ExitClass.TIMEOUT, -220, "max runtime of 2s was reached",
        max_runtime_s=2,
    ),
    "timeout with failures tolerated": Path(
        [RolePolicy("w", 1, None, None)], [ProcessExit(None, SIGTERM, timed_out=True)],
        [State.FAILED], [ExitClass.TIMEOUT], [-220],
        JobVerdict.FAILED, ExitClass.TIMEOUT, -220, "max runtime of 5400s (1h30m) was reached",
        max_runtime_s=5400,
    ),
    "node loss": Path(
        ONE, [ProcessExit(None, lost=True)], [State.FAILED], [ExitClass.PLATFORM_FAILURE],
        [-1001], JobVerdict.FAILED, ExitClass.PLATFORM_FAILURE, -1001, "role w failed",
    ),
    "agent restart: the attempt vanished": Path(
        TWO, [ProcessExit(None, lost=True), None], [State.FAILED, State.RUNNING],
        [ExitClass.PLATFORM_FAILURE, None], [-1001],
        JobVerdict.FAILED, ExitClass.PLATFORM_FAILURE, -1001,
    ),
    "could not launch": Path(
        ONE, [ProcessExit(None, launch_error="no such dir")], [State.FAILED],
        [ExitClass.PLATFORM_FAILURE], [-1001], JobVerdict.FAILED, ExitClass.PLATFORM_FAILURE,
    ),
    "server restart: tasks adopted, exits delivered later": Path(
        TWO, [ProcessExit(0), ProcessExit(0)], [State.SUCCEEDED, State.SUCCEEDED],
        [ExitClass.SUCCEEDED, ExitClass.SUCCEEDED], [0, 0],
        JobVerdict.SUCCEEDED, ExitClass.SUCCEEDED, 0,
    ),
    "agent shutdown (`shoal down`)": Path(
        ONE, [ProcessExit(None, SIGTERM, agent_shutdown=True)], [State.STOPPED],
        [ExitClass.STOPPED], [143], JobVerdict.STOPPED, ExitClass.STOPPED, -210,
        "w[0] was stopped before the job was decided",
    ),
    "agent shutdown, one task had already succeeded": Path(
        TWO, [ProcessExit(0), ProcessExit(None, SIGTERM, agent_shutdown=True)],
        [State.SUCCEEDED, State.STOPPED], [ExitClass.SUCCEEDED, ExitClass.STOPPED], [0, 143],
        JobVerdict.STOPPED, ExitClass.STOPPED, -210,
    ),
    "agent shutdown before the launch": Path(
        ONE, [ProcessExit(None, agent_shutdown=True)], [State.STOPPED], [ExitClass.STOPPED],
        [-210], JobVerdict.STOPPED, ExitClass.STOPPED, -210,
    ),
    "tasks that handle SIGTERM and exit 0 after a shutdown": Path(
        ONE, [ProcessExit(0, agent_shutdown=True)], [State.STOPPED], [ExitClass.STOPPED], [0],
        JobVerdict.STOPPED, ExitClass.STOPPED, -210,
    ),
}  # fmt: skip


def _run(path: Path) -> tuple[list[TaskOutcome], JobEnd | None, JobVerdict]:
    outcomes = []
    for index, result in enumerate(path.exits):
        if result is None:
            outcomes.append(TaskOutcome("w", index, State.RUNNING))
            continue
        end = end_task(result, preempting=path.preempting)
        state = advance_task(State.RUNNING, TaskEvent(end.state.value.lower()))
        assert state is end.state
        outcomes.append(TaskOutcome("w", index, end.state, end.exit_class, end.exit_code))
    verdict = judge(path.policies, outcomes, path.max_runtime_s)
    decided = None if verdict.verdict is JobVerdict.UNDECIDED else end_job(verdict)
    return outcomes, decided, verdict.verdict


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_every_path_ends_truthfully(path: Path) -> None:
    outcomes, end, verdict = _run(path)
    assert [t.state for t in outcomes] == path.task_states
    assert [t.exit_class for t in outcomes] == path.task_classes
    assert [t.exit_code for t in outcomes][: len(path.task_codes)] == path.task_codes
    assert verdict is path.job
    assert end is not None
    assert end.state.value == path.job.value
    assert end.exit_class is path.job_class
    if path.job_code is not None:
        assert end.exit_code == path.job_code
    assert path.words in end.diagnostics


def test_a_stop_request_that_came_after_the_exit_does_not_relabel_it() -> None:
    # The server had asked for a stop (the task is STOPPING) but the process had exited 0 first:
    # the agent reports no stop, and the task keeps its success.
    end = end_task(ProcessExit(0))
    assert advance_task(State.STOPPING, TaskEvent.SUCCEEDED) is State.SUCCEEDED
    assert (end.state, end.exit_class, end.exit_code) == (State.SUCCEEDED, ExitClass.SUCCEEDED, 0)
    assert advance_task(State.STOPPING, TaskEvent.FAILED) is State.FAILED
    assert advance_task(State.STOPPING, TaskEvent.STOPPED) is State.STOPPED


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (ProcessExit(None, SIGTERM, agent_shutdown=True), "agent shut down (`shoal down`"),
        (ProcessExit(None, SIGTERM, agent_shutdown=True), "killed by signal 15"),
        (ProcessExit(None, SIGTERM, stop_requested=True), "killed by signal 15"),
        (ProcessExit(None, SIGTERM, timed_out=True), "max runtime was reached"),
        (ProcessExit(None, lost=True), "lost"),
        (ProcessExit(None, launch_error="boom"), "could not launch: boom"),
    ],
)
def test_task_diagnostics_name_the_cause(result: ProcessExit, words: str) -> None:
    assert words in end_task(result).diagnostics


def test_preempted_task_names_preemption() -> None:
    end = end_task(ProcessExit(None, SIGTERM, stop_requested=True), preempting=True)
    assert "preemption" in end.diagnostics and end.state is State.STOPPED


@pytest.mark.parametrize(
    ("cause", "detail", "words"),
    [
        (StopCause.USER, "alice", "stopped by alice"),
        (StopCause.AGENT_SHUTDOWN, "node-0", "the agent on node-0 shut down (`shoal down`"),
        (StopCause.AGENT_SHUTDOWN, "node-0", "not rerun"),
        (StopCause.INTERRUPTED, "w[1] was stopped", "interrupted: w[1] was stopped"),
    ],
)
def test_a_stopped_job_says_why(cause: StopCause, detail: str, words: str) -> None:
    end = stopped_job(cause, detail)
    assert (end.state, end.exit_class, end.exit_code) == (State.STOPPED, ExitClass.STOPPED, -210)
    assert words in end.diagnostics


@pytest.mark.parametrize(
    ("exit_class", "cause"),
    [
        (ExitClass.USER_FAILURE, RetryCause.USER),
        (ExitClass.PLATFORM_FAILURE, RetryCause.PLATFORM),
        (ExitClass.PREEMPTED, RetryCause.RESOURCE),
    ],
)
def test_retry_causes(exit_class: ExitClass, cause: RetryCause) -> None:
    assert retry_cause(exit_class) is cause


def test_which_failures_are_retried() -> None:
    def failed(exit_class: ExitClass) -> JobEnd:
        return JobEnd(State.FAILED, exit_class, 1, "")

    assert should_retry_job(failed(ExitClass.USER_FAILURE), retries_used=0, job_retry_count=1)
    assert should_retry_job(failed(ExitClass.PLATFORM_FAILURE), retries_used=0, job_retry_count=1)
    assert not should_retry_job(failed(ExitClass.USER_FAILURE), retries_used=1, job_retry_count=1)
    # its max runtime counts from the first launch: another attempt would time out at once
    assert not should_retry_job(failed(ExitClass.TIMEOUT), retries_used=0, job_retry_count=3)
    assert not should_retry_job(stopped_job(StopCause.USER), retries_used=0, job_retry_count=3)
    assert should_retry_task(ExitClass.PLATFORM_FAILURE, 0, 1)
    assert not should_retry_task(ExitClass.STOPPED, 0, 1)
    assert not should_retry_task(ExitClass.TIMEOUT, 0, 1)


# ---- properties ----

exits = st.builds(
    ProcessExit,
    exit_code=st.one_of(st.none(), st.integers(0, 255)),
    signal=st.one_of(st.none(), st.sampled_from([2, 9, 15])),
    stop_requested=st.booleans(),
    timed_out=st.booleans(),
    launch_error=st.one_of(st.none(), st.just("boom")),
    lost=st.booleans(),
    agent_shutdown=st.booleans(),
)
live = st.sampled_from([State.WAITING, State.RUNNING, State.STOPPING])


@st.composite
def jobs(draw: st.DrawFn) -> tuple[list[RolePolicy], list[TaskOutcome]]:
    roles = draw(st.integers(1, 3))
    policies, tasks = [], []
    for r in range(roles):
        instances = draw(st.integers(1, 4))
        min_failed = draw(st.one_of(st.none(), st.integers(1, instances)))
        min_succeeded = draw(st.one_of(st.none(), st.integers(1, instances)))
        policies.append(RolePolicy(f"r{r}", instances, min_failed, min_succeeded))
        for i in range(instances):
            result = draw(st.one_of(st.none(), exits))
            if result is None:
                tasks.append(TaskOutcome(f"r{r}", i, draw(live)))
            else:
                end = end_task(result, preempting=draw(st.booleans()))
                tasks.append(TaskOutcome(f"r{r}", i, end.state, end.exit_class, end.exit_code))
    return policies, tasks


@PROPERTY
@given(exits, st.booleans())
def test_only_an_unsignalled_exit_0_is_a_success(result: ProcessExit, preempting: bool) -> None:
    end = end_task(result, preempting=preempting)
    clean = not (
        result.stop_requested or result.agent_shutdown or result.timed_out or result.lost
    ) and (result.launch_error is None)
    assert (end.state is State.SUCCEEDED) == (clean and result.exit_code == 0)
    assert (end.exit_class is ExitClass.SUCCEEDED) == (end.state is State.SUCCEEDED)
    if result.agent_shutdown or result.stop_requested:
        assert end.state is not State.SUCCEEDED


@PROPERTY
@given(jobs())
def test_a_job_whose_tasks_were_all_stopped_never_succeeds(
    job: tuple[list[RolePolicy], list[TaskOutcome]],
) -> None:
    policies, tasks = job
    stopped = [TaskOutcome(t.role, t.index, State.STOPPED, ExitClass.STOPPED) for t in tasks]
    assert judge(policies, stopped).verdict is JobVerdict.STOPPED


@PROPERTY
@given(jobs())
def test_verdicts_are_consistent(job: tuple[list[RolePolicy], list[TaskOutcome]]) -> None:
    policies, tasks = job
    verdict = judge(policies, tasks, max_runtime_s=60)
    if verdict.verdict is JobVerdict.UNDECIDED:
        assert not any(t.state is State.STOPPED for t in tasks)
        return
    end = end_job(verdict)
    assert end.state.value == verdict.verdict.value
    if any(t.exit_class is ExitClass.TIMEOUT for t in tasks):
        assert (end.exit_class, end.state) == (ExitClass.TIMEOUT, State.FAILED)
        assert "max runtime of 60s (1m) was reached" in end.diagnostics
    if end.state is State.SUCCEEDED:
        assert (end.exit_class, end.exit_code) == (ExitClass.SUCCEEDED, 0)
        thresholds = any(
            p.min_succeeded is not None
            and sum(1 for t in tasks if t.role == p.name and t.state is State.SUCCEEDED)
            >= p.min_succeeded
            for p in policies
        )
        # a stopped task makes a job succeed only through a role's min_succeeded threshold
        assert thresholds or not any(t.state is State.STOPPED for t in tasks)
    if end.state is State.FAILED:
        assert end.exit_class is not ExitClass.SUCCEEDED
