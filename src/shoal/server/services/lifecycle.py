"""Task starts and exits, retries, and the job's fate under its completion policy."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.lifecycle import (
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
    stop_reason,
    stopped_job,
)
from shoal.core.nodestates import Liveness
from shoal.core.states import JobEvent, State, TaskEvent, advance_job, advance_task
from shoal.server.notify import note_news
from shoal.server.services.accounting import fold_attempt
from shoal.server.services.arrays import element_ended
from shoal.server.services.events import record
from shoal.server.services.port_clash import PORT_CLASH
from shoal.server.services.snapshot import spec_of
from shoal.server.services.stopping import request_kill
from shoal.store.models import Job, Node, Task

# The task event that ends a task in each final state.
_ENDING = {
    State.SUCCEEDED: TaskEvent.SUCCEEDED,
    State.FAILED: TaskEvent.FAILED,
    State.STOPPED: TaskEvent.STOPPED,
}
# ``Job.completing``: why a job's tasks are being ended before the job moves on.
PREEMPTED, RETRY, SHUTDOWN, INTERRUPTED = "preempted", "retry", "shutdown", "interrupted"


def on_started(session: Session, task: Task, pid: int, started_at: float) -> None:
    if task.state != State.WAITING.value:
        return
    task.state = advance_task(State.WAITING, TaskEvent.LAUNCHED).value
    task.launch_acked = True
    task.pid = pid
    task.started_at = started_at
    if task.kill_requested:
        task.state = advance_task(State.RUNNING, TaskEvent.STOP_REQUESTED).value
    what = "started" if task.attempt == 1 else f"restarted (attempt {task.attempt})"
    record(
        session,
        task.job_id,
        started_at,
        "started",
        f"{task.role}[{task.index}] {what} on {task.node} (pid {pid})",
        task.role,
        task.index,
    )


def on_exit(
    session: Session,
    task: Task,
    result: ProcessExit,
    now: float,
    usage: dict[str, object] | None = None,
) -> None:
    """Record how one task attempt ended; retry it in place or let the job decide."""
    if State(task.state).is_terminal:
        return
    if task.state == State.WAITING.value:
        task.state = State.RUNNING.value  # it never reported running; it did start (or try to)
    job = session.get(Job, task.job_id)
    assert job is not None
    end = end_task(result, preempting=job.completing == PREEMPTED)
    task.exit_class = end.exit_class.value
    task.exit_code = end.exit_code
    task.finished_at = now
    task.diagnostics = end.diagnostics
    task.usage = dict(usage or {})
    limit = spec_of(job).role(task.role).task_retry_count
    retrying = (
        not job.stop_requested
        and job.completing is None
        and job.state == State.RUNNING.value
        and should_retry_task(end.exit_class, task.attempt - 1, limit)
        and _node_is_up(session, task.node)  # a retry in place on a lost node waits for it
    )
    record(
        session,
        job.id,
        now,
        "exited",
        f"{task.role}[{task.index}] attempt {task.attempt} exited: {end.exit_class.value} "
        f"(code {task.exit_code}){'; ' + task.diagnostics if task.diagnostics else ''}",
        task.role,
        task.index,
    )
    if retrying:
        _retry_in_place(session, task, limit, now)
        return
    task.state = advance_task(State(task.state), _ENDING[end.state]).value
    if result.agent_shutdown:
        _interrupt(session, job, SHUTDOWN, stop_reason(StopCause.AGENT_SHUTDOWN, task.node), now)
    settle_job(session, job, now, task)


def _node_is_up(session: Session, name: str) -> bool:
    """Whether a task may be retried in place on ``name``: a NOT_READY (or removed) node's tasks
    are not; the job's own retries place its gang again on the nodes that are up."""
    node = session.get(Node, name)
    return node is not None and node.state == Liveness.READY.value


def _interrupt(session: Session, job: Job, why: str, diagnostics: str, now: float) -> None:
    """Stop a running, undecided job that something other than its user interrupted."""
    if job.state != State.RUNNING.value or job.completing is not None or job.stop_requested:
        return  # already decided, requeueing or stopping: that course stands
    job.state = advance_job(State.RUNNING, JobEvent.STOP_REQUESTED).value
    job.completing = why
    job.diagnostics = diagnostics
    job.version += 1
    record(session, job.id, now, "stopping", diagnostics)
    request_kill(session, job.id)


def _retry_in_place(session: Session, task: Task, limit: int, now: float) -> None:
    task.earlier_usage = fold_attempt(
        task.earlier_usage or {}, task.started_at, task.finished_at, task.usage or {}
    )
    task.state = advance_task(State(task.state), TaskEvent.RETRIED).value
    task.attempt += 1
    task.launch_acked = False
    note_news(session, [task.node])
    task.pid = None
    task.started_at = None
    task.finished_at = None
    record(
        session,
        task.job_id,
        now,
        "retried",
        f"{task.role}[{task.index}] will run again on {task.node} "
        f"(retry {task.attempt - 1} of {limit})",
        task.role,
        task.index,
    )


def _attempt_tasks(session: Session, job: Job, task: Task | None) -> list[Task]:
    """The tasks of the job's current attempt (no query when ``task`` is the only one)."""
    alone = task is not None and sum(role.instances for role in spec_of(job).roles) == 1
    if alone and task is not None and task.job_attempt == job.attempt:
        return [task]
    return list(
        session.scalars(select(Task).where(Task.job_id == job.id, Task.job_attempt == job.attempt))
    )


def settle_job(session: Session, job: Job, now: float, task: Task | None = None) -> None:
    """Decide the job's fate from its current attempt's tasks, and finish what can finish
    (``task``: the task that just changed, if any)."""
    tasks = _attempt_tasks(session, job, task)
    if job.state == State.RUNNING.value and job.completing is None and not job.stop_requested:
        _apply_verdict(session, job, tasks, now)
    if not tasks or not all(State(t.state).is_terminal for t in tasks):
        return
    if job.completing == PORT_CLASH and not job.stop_requested:
        _requeue(session, job, RetryCause.RESOURCE, now)
        record(
            session,
            job.id,
            now,
            "requeued",
            "back in the queue after a port clash, to be placed on free ports; it keeps its "
            "submission time, so its place",
        )
    elif job.completing == PREEMPTED:
        _requeue(session, job, RetryCause.RESOURCE, now)
        record(
            session,
            job.id,
            now,
            "requeued",
            f"back in the queue after {_preempted_for(job.preempted_by)}; it keeps its "
            "submission time, so its place",
        )
        job.preempted_by = None
    elif job.completing == RETRY:
        _requeue(session, job, retry_cause(ExitClass(job.exit_class or "USER_FAILURE")), now)
        record(
            session,
            job.id,
            now,
            "requeued",
            f"retry {job.retries_user + job.retries_platform} of {job.job_retry_count} is "
            f"queued (attempt {job.attempt + 1})",
        )
    elif job.state == State.STOPPING.value:
        cause = {SHUTDOWN: StopCause.AGENT_SHUTDOWN, INTERRUPTED: StopCause.INTERRUPTED}.get(
            job.completing or "", StopCause.USER
        )
        end = stopped_job(cause)
        _finish(job, end, now, keep_diagnostics=True)
        job.completing = None
        record(session, job.id, now, "stopped", f"every task has stopped: {job.diagnostics}")
    if State(job.state).is_terminal:  # and every task has exited: an array may go on
        element_ended(session, job, now)


def _preempted_for(by: str | None) -> str:
    if by is not None and by.startswith("node:"):  # services/preemption_notices.py
        return f"its node {by.removeprefix('node:')} was preempted by its cloud"
    return f"preemption for job {by}"


def _requeue(session: Session, job: Job, cause: RetryCause, now: float) -> None:
    """Back to the queue for another attempt, counting the retry by its cause."""
    event = JobEvent.PREEMPTED if cause is RetryCause.RESOURCE else JobEvent.RETRIED
    job.state = advance_job(State.RUNNING, event).value
    job.completing = None
    job.version += 1
    if cause is RetryCause.RESOURCE:
        job.retries_resource += 1
    elif cause is RetryCause.PLATFORM:
        job.retries_platform += 1
    else:
        job.retries_user += 1


def _finish(job: Job, end: JobEnd, now: float, keep_diagnostics: bool = False) -> None:
    """Apply a job's end (``keep_diagnostics``: the reason given when its stop began stands)."""
    event = {State.SUCCEEDED: JobEvent.SUCCEEDED, State.FAILED: JobEvent.FAILED}.get(
        end.state, JobEvent.STOPPED
    )
    job.state = advance_job(State(job.state), event).value
    job.exit_class, job.exit_code = end.exit_class.value, end.exit_code
    if not (keep_diagnostics and job.diagnostics):
        job.diagnostics = end.diagnostics
    job.version += 1
    job.completed_at = now


def _apply_verdict(session: Session, job: Job, tasks: list[Task], now: float) -> None:
    spec = spec_of(job)
    policies = [
        RolePolicy(r.name, r.instances, r.completion.min_failed, r.completion.min_succeeded)
        for r in spec.roles
    ]
    outcomes = [
        TaskOutcome(
            t.role,
            t.index,
            State(t.state),
            ExitClass(t.exit_class) if t.exit_class and State(t.state).is_terminal else None,
            t.exit_code,
        )
        for t in tasks
    ]
    verdict = judge(policies, outcomes, spec.max_runtime_s)
    if verdict.verdict is JobVerdict.UNDECIDED:
        return
    end = end_job(verdict)
    if end.state is State.STOPPED:
        _interrupt(session, job, INTERRUPTED, end.diagnostics, now)
        return
    job.diagnostics = end.diagnostics
    job.exit_class, job.exit_code = end.exit_class.value, end.exit_code
    if should_retry_job(end, job.retries_user + job.retries_platform, job.job_retry_count):
        job.completing = RETRY
        record(
            session,
            job.id,
            now,
            "failing",
            f"attempt {job.attempt} failed ({end.diagnostics}); it will be retried",
        )
        request_kill(session, job.id, tasks)
        return
    _finish(job, end, now)
    record(session, job.id, now, job.state.lower(), end.diagnostics)
    request_kill(session, job.id, tasks)
