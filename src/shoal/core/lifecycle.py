"""What a task's exit means, and what it does to its job: pure rules, no I/O.

Exit classes follow the spirit of OpenPAI's exit spec: who caused the exit (the user's code, the
user's stop request, the platform) decides whether it is retried and how the job ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from shoal.core.states import State


class ExitClass(StrEnum):
    SUCCEEDED = "SUCCEEDED"  # exit code 0
    USER_FAILURE = "USER_FAILURE"  # non-zero exit code or killed by a signal the user's code caused
    STOPPED = "STOPPED"  # the user (or the job's completion) asked it to stop
    TIMEOUT = "TIMEOUT"  # the job's max runtime was reached
    PLATFORM_FAILURE = "PLATFORM_FAILURE"  # could not launch, node lost, agent lost the process
    PREEMPTED = "PREEMPTED"  # its resources were reclaimed for another job


# OpenPAI-compatible exit codes for the non-user classes (k8s-job-exit-spec.yaml).
EXIT_CODES = {
    ExitClass.STOPPED: -210,  # StopFrameworkRequested
    ExitClass.TIMEOUT: -220,  # FrameworkAttemptCompletion (stopped by the platform, on time)
    ExitClass.PLATFORM_FAILURE: -1001,  # PodNodeLost
    ExitClass.PREEMPTED: -7120,  # CONTAINER_PREEMPTED (YARN era)
}

RETRYABLE = frozenset({ExitClass.USER_FAILURE, ExitClass.PLATFORM_FAILURE})


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """How a process ended, as the agent saw it."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None = None
    stop_requested: bool = False
    timed_out: bool = False
    launch_error: str | None = None
    lost: bool = False


def classify_exit(result: ProcessExit) -> ExitClass:
    if result.launch_error is not None or result.lost:
        return ExitClass.PLATFORM_FAILURE
    if result.timed_out:
        return ExitClass.TIMEOUT
    if result.stop_requested:
        return ExitClass.STOPPED
    if result.exit_code == 0:
        return ExitClass.SUCCEEDED
    return ExitClass.USER_FAILURE


def reported_exit_code(result: ProcessExit, exit_class: ExitClass) -> int:
    """The code users see: the process's own, 128+signal for a signal, or a platform code."""
    if exit_class in EXIT_CODES and exit_class is not ExitClass.STOPPED:
        return EXIT_CODES[exit_class]
    if result.exit_code is not None:
        return result.exit_code
    if result.signal is not None:
        return 128 + result.signal
    return EXIT_CODES.get(exit_class, -8000)


@dataclass(frozen=True, slots=True)
class RolePolicy:
    name: str
    instances: int
    min_failed: int | None
    min_succeeded: int | None


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    role: str
    index: int
    state: State  # SUCCEEDED / FAILED / STOPPED when finished, else WAITING / RUNNING / STOPPING


class JobVerdict(StrEnum):
    UNDECIDED = "UNDECIDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: JobVerdict
    reason: str = ""


def judge(policies: Sequence[RolePolicy], tasks: Sequence[TaskOutcome]) -> Verdict:
    """Apply the per-role completion policy (OpenPAI/FrameworkController semantics).

    A role whose failed count reaches ``min_failed`` fails the job at once; a role whose succeeded
    count reaches ``min_succeeded`` succeeds it at once (failure checked first). If no threshold
    trips, the job succeeds when every task has finished.
    """
    by_role: dict[str, list[TaskOutcome]] = {}
    for task in tasks:
        by_role.setdefault(task.role, []).append(task)
    for policy in policies:
        failed = sum(1 for t in by_role.get(policy.name, []) if t.state is State.FAILED)
        if policy.min_failed is not None and failed >= policy.min_failed:
            return Verdict(
                JobVerdict.FAILED,
                f"{failed} instance(s) of role {policy.name} failed "
                f"(the role fails the job at {policy.min_failed})",
            )
    for policy in policies:
        done = sum(1 for t in by_role.get(policy.name, []) if t.state is State.SUCCEEDED)
        if policy.min_succeeded is not None and done >= policy.min_succeeded:
            return Verdict(
                JobVerdict.SUCCEEDED,
                f"{done} instance(s) of role {policy.name} succeeded "
                f"(the role succeeds the job at {policy.min_succeeded})",
            )
    if tasks and all(t.state.is_terminal for t in tasks):
        return Verdict(
            JobVerdict.SUCCEEDED, "every task finished without tripping a failure policy"
        )
    return Verdict(JobVerdict.UNDECIDED)


def should_retry_task(exit_class: ExitClass, retries_used: int, retry_limit: int) -> bool:
    return exit_class in RETRYABLE and retries_used < retry_limit


def task_state_for(exit_class: ExitClass) -> State:
    return {
        ExitClass.SUCCEEDED: State.SUCCEEDED,
        ExitClass.STOPPED: State.STOPPED,
        ExitClass.PREEMPTED: State.STOPPED,
    }.get(exit_class, State.FAILED)
