"""What a task's exit means, and what it does to its job: pure rules, no I/O.

Exit classes follow the spirit of OpenPAI's exit spec: who caused the exit (the user's code, the
user's stop request, the platform) decides whether it is retried and how the job ends. This module
is the one place where final states, exit classes, exit codes and diagnostics are derived: the
server only applies what it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from shoal.core.states import State


class ExitClass(StrEnum):
    SUCCEEDED = "SUCCEEDED"  # exit code 0, on its own
    USER_FAILURE = "USER_FAILURE"  # non-zero exit code or killed by a signal the user's code caused
    STOPPED = "STOPPED"  # the user, the job's completion or the agent's shutdown stopped it
    TIMEOUT = "TIMEOUT"  # the job's max runtime was reached
    PLATFORM_FAILURE = "PLATFORM_FAILURE"  # could not launch, node lost, agent lost the process
    PREEMPTED = "PREEMPTED"  # its resources were reclaimed for another job
    OOM = "OOM"  # killed by its memory limit (the role's memory)


# OpenPAI-compatible exit codes for the non-user classes (k8s-job-exit-spec.yaml).
EXIT_CODES = {
    ExitClass.STOPPED: -210,  # StopFrameworkRequested
    ExitClass.TIMEOUT: -220,  # FrameworkAttemptCompletion (stopped by the platform, on time)
    ExitClass.PLATFORM_FAILURE: -1001,  # PodNodeLost
    ExitClass.PREEMPTED: -7120,  # CONTAINER_PREEMPTED (YARN era)
    ExitClass.OOM: -1200,  # UserContainerDockerOOMKilled
}

# OpenPAI never retries -1200; here the job's own retry policy decides, as for any failure.
RETRYABLE = frozenset({ExitClass.USER_FAILURE, ExitClass.PLATFORM_FAILURE, ExitClass.OOM})

SHUTDOWN = "shut down (`shoal down`, or the agent process was stopped)"


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """How a process ended, as the agent saw it.

    ``stop_requested``: the agent signalled it because the server asked; ``agent_shutdown``: the
    agent signalled it because the agent itself was shutting down. Neither is set when the process
    had already exited before any signal was sent: such an exit keeps its own class."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None = None
    stop_requested: bool = False
    timed_out: bool = False
    launch_error: str | None = None
    lost: bool = False
    lost_reason: str | None = None  # what the platform said (an evicted Pod, a removed node)
    agent_shutdown: bool = False
    fenced: bool = False  # its agent stopped it: no report acknowledged within the lease
    oom_killed: bool = False  # the memory limit's OOM killer ended the task's command
    oom_kills: int = 0  # processes of the task the memory limit's OOM killer ended
    memory_limit_mib: int | None = None
    peak_memory_mib: float | None = None
    message: str | None = None  # what the task's command said on its failure (ExitReport)


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How one task attempt ended, everything derived from its ``ProcessExit``."""

    exit_class: ExitClass
    exit_code: int
    state: State  # SUCCEEDED, FAILED or STOPPED
    diagnostics: str


def classify_exit(result: ProcessExit, *, preempting: bool = False) -> ExitClass:
    """``preempting``: the job's resources are being reclaimed, so a stop is a preemption."""
    if result.launch_error is not None or result.lost or result.fenced:
        return ExitClass.PLATFORM_FAILURE
    if result.timed_out:
        return ExitClass.TIMEOUT
    if result.stop_requested or result.agent_shutdown:
        return ExitClass.PREEMPTED if preempting else ExitClass.STOPPED
    if result.oom_killed:
        return ExitClass.OOM
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


def task_state_for(exit_class: ExitClass) -> State:
    return {
        ExitClass.SUCCEEDED: State.SUCCEEDED,
        ExitClass.STOPPED: State.STOPPED,
        ExitClass.PREEMPTED: State.STOPPED,
    }.get(exit_class, State.FAILED)


LOST = "the node or agent running it was lost"


def _task_diagnostics(result: ProcessExit, exit_class: ExitClass) -> str:
    if result.launch_error:
        return f"could not launch: {result.launch_error}"
    if result.lost:
        return f"lost: {result.lost_reason}" if result.lost_reason else LOST
    if result.fenced:
        return (
            "its agent stopped it: the server acknowledged none of the agent's reports within "
            "its lease (fencing), so the task could have been declared lost and run elsewhere"
        )
    cause = {
        ExitClass.TIMEOUT: "the job's max runtime was reached",
        ExitClass.PREEMPTED: "stopped to give its resources to another job (preemption)",
    }.get(exit_class, "")
    if exit_class is ExitClass.STOPPED:
        cause = f"stopped because its agent {SHUTDOWN}" if result.agent_shutdown else ""
    if exit_class is ExitClass.OOM or result.oom_kills:
        cause = "; ".join(part for part in (cause, memory_diagnostic(result)) if part)
    killed = f"killed by signal {result.signal}" if result.signal is not None else ""
    return "; ".join(part for part in (result.message, cause, killed) if part)


def memory_diagnostic(result: ProcessExit) -> str:
    """What the memory limit did, with the limit and the peak, and what to do about it."""
    limit = f" of {result.memory_limit_mib} MiB" if result.memory_limit_mib else ""
    peak = (
        f" (peak use {result.peak_memory_mib:.1f} MiB)"
        if result.peak_memory_mib is not None
        else ""
    )
    if result.oom_killed:
        what = f"killed by its memory limit{limit}{peak}"
    else:
        count = "a process" if result.oom_kills == 1 else f"{result.oom_kills} processes"
        what = f"{count} of the task killed by its memory limit{limit}{peak}"
    return f"{what}: give the role more memory (resources.memory / memoryMB) or use less"


def end_task(result: ProcessExit, *, preempting: bool = False) -> TaskEnd:
    """The class, code, final state and diagnostics of one finished task attempt."""
    exit_class = classify_exit(result, preempting=preempting)
    return TaskEnd(
        exit_class,
        reported_exit_code(result, exit_class),
        task_state_for(exit_class),
        _task_diagnostics(result, exit_class),
    )


def should_retry_task(exit_class: ExitClass, retries_used: int, retry_limit: int) -> bool:
    return exit_class in RETRYABLE and retries_used < retry_limit


# ---- the job ----


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
    exit_class: ExitClass | None = None
    exit_code: int | None = None


class JobVerdict(StrEnum):
    UNDECIDED = "UNDECIDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # a task was stopped before the job was decided: it was interrupted


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: JobVerdict
    reason: str = ""
    trigger: TaskOutcome | None = None  # the task whose exit decided it, if one did


def _duration(seconds: float) -> str:
    text = f"{seconds:g}s"
    if seconds >= 60:
        hours, rest = divmod(int(seconds), 3600)
        minutes, secs = divmod(rest, 60)
        human = "".join(f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v)
        text += f" ({human})"
    return text


def timeout_reason(max_runtime_s: float | None) -> str:
    limit = f" of {_duration(max_runtime_s)}" if max_runtime_s else ""
    return f"the job's max runtime{limit} was reached; its tasks were stopped"


def judge(
    policies: Sequence[RolePolicy],
    tasks: Sequence[TaskOutcome],
    max_runtime_s: float | None = None,
) -> Verdict:
    """Apply the per-role completion policy (OpenPAI/FrameworkController semantics).

    A task that ran out of the job's max runtime fails the job at once (class TIMEOUT). A role
    whose failed count reaches ``min_failed`` fails the job at once; a role whose succeeded count
    reaches ``min_succeeded`` succeeds it at once (failure checked first). A task stopped before
    any of that (by something other than the job's own decision: an agent's shutdown) means the
    job was interrupted: STOPPED, never SUCCEEDED. Otherwise the job succeeds when every task has
    finished.
    """
    timed_out = next((t for t in tasks if t.exit_class is ExitClass.TIMEOUT), None)
    if timed_out is not None:
        return Verdict(JobVerdict.FAILED, timeout_reason(max_runtime_s), timed_out)
    by_role: dict[str, list[TaskOutcome]] = {}
    for task in tasks:
        by_role.setdefault(task.role, []).append(task)
    for policy in policies:
        failed = [t for t in by_role.get(policy.name, []) if t.state is State.FAILED]
        if policy.min_failed is not None and failed and len(failed) >= policy.min_failed:
            return Verdict(
                JobVerdict.FAILED,
                f"{len(failed)} instance(s) of role {policy.name} failed "
                f"(the role fails the job at {policy.min_failed})",
                failed[0],
            )
    for policy in policies:
        done = [t for t in by_role.get(policy.name, []) if t.state is State.SUCCEEDED]
        if policy.min_succeeded is not None and done and len(done) >= policy.min_succeeded:
            return Verdict(
                JobVerdict.SUCCEEDED,
                f"{len(done)} instance(s) of role {policy.name} succeeded "
                f"(the role succeeds the job at {policy.min_succeeded})",
                done[0],
            )
    stopped = next((t for t in tasks if t.state is State.STOPPED), None)
    if stopped is not None:
        return Verdict(
            JobVerdict.STOPPED,
            f"{stopped.role}[{stopped.index}] was stopped before the job was decided",
            stopped,
        )
    if tasks and all(t.state.is_terminal for t in tasks):
        failed_count = sum(1 for t in tasks if t.state is State.FAILED)
        tolerated = f" ({failed_count} failure(s) tolerated by the policy)" if failed_count else ""
        return Verdict(
            JobVerdict.SUCCEEDED,
            f"every task finished without tripping a failure policy{tolerated}",
        )
    return Verdict(JobVerdict.UNDECIDED)


class StopCause(StrEnum):
    USER = "user"  # someone ran `job stop`
    AGENT_SHUTDOWN = "agent_shutdown"  # an agent stopped the job's tasks as it shut down
    INTERRUPTED = "interrupted"  # a task was stopped before the job was decided


@dataclass(frozen=True, slots=True)
class JobEnd:
    """A job's final state, class, code and diagnostics."""

    state: State  # SUCCEEDED, FAILED or STOPPED
    exit_class: ExitClass
    exit_code: int | None
    diagnostics: str


def stop_reason(cause: StopCause, detail: str = "") -> str:
    """``detail``: who asked (USER), the node (AGENT_SHUTDOWN), the verdict (INTERRUPTED)."""
    if cause is StopCause.USER:
        return f"stopped by {detail}" if detail else "stopped on request"
    if cause is StopCause.AGENT_SHUTDOWN:
        where = f" on {detail}" if detail else ""
        return (
            f"interrupted: the agent{where} {SHUTDOWN} and stopped the job's tasks; "
            "a job interrupted this way is not rerun: submit it again"
        )
    return f"interrupted: {detail}" if detail else "interrupted"


def stopped_job(cause: StopCause, detail: str = "") -> JobEnd:
    return JobEnd(
        State.STOPPED, ExitClass.STOPPED, EXIT_CODES[ExitClass.STOPPED], stop_reason(cause, detail)
    )


def end_job(verdict: Verdict) -> JobEnd:
    """The job's end for a decided verdict."""
    trigger = verdict.trigger
    if verdict.verdict is JobVerdict.SUCCEEDED:
        return JobEnd(State.SUCCEEDED, ExitClass.SUCCEEDED, 0, verdict.reason)
    if verdict.verdict is JobVerdict.STOPPED:
        return stopped_job(StopCause.INTERRUPTED, verdict.reason)
    if verdict.verdict is JobVerdict.FAILED:
        exit_class = (trigger.exit_class if trigger else None) or ExitClass.USER_FAILURE
        return JobEnd(
            State.FAILED, exit_class, trigger.exit_code if trigger else None, verdict.reason
        )
    raise ValueError("an undecided job has no end")


def should_retry_job(end: JobEnd, retries_used: int, job_retry_count: int) -> bool:
    """A failed attempt runs again while job retries remain, unless it ran out of time (its max
    runtime counts from the first launch, so another attempt would time out at once).
    ``retries_used`` counts the retries after failures (user or platform): going back to the
    queue for a preemption or a port clash does not use up the job's retries."""
    return (
        end.state is State.FAILED and end.exit_class in RETRYABLE and retries_used < job_retry_count
    )


class RetryCause(StrEnum):
    """Why a job went back to the queue (OpenPAI's ``retryDetails`` keys)."""

    USER = "user"
    PLATFORM = "platform"
    RESOURCE = "resource"


def retry_cause(exit_class: ExitClass) -> RetryCause:
    if exit_class is ExitClass.PREEMPTED:
        return RetryCause.RESOURCE
    if exit_class is ExitClass.PLATFORM_FAILURE:
        return RetryCause.PLATFORM
    return RetryCause.USER
