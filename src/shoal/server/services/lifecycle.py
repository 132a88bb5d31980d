"""Task starts and exits, retries, and the job's fate under its completion policy."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.lifecycle import (
    ExitClass,
    JobVerdict,
    ProcessExit,
    RolePolicy,
    TaskOutcome,
    classify_exit,
    judge,
    reported_exit_code,
    should_retry_task,
    task_state_for,
)
from shoal.core.states import JobEvent, State, TaskEvent, advance_job, advance_task
from shoal.server.services.events import record
from shoal.server.services.jobs import request_kill
from shoal.server.services.port_clash import requeue_after_port_clash
from shoal.server.services.snapshot import spec_of
from shoal.store.models import Job, Task


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
    if task.kill_requested and not result.stop_requested and not result.timed_out:
        result = ProcessExit(
            result.exit_code, result.signal, True, False, result.launch_error, result.lost
        )
    exit_class = classify_exit(result)
    job = session.get(Job, task.job_id)
    assert job is not None
    if job.completing == "preempted" and exit_class is ExitClass.STOPPED:
        exit_class = ExitClass.PREEMPTED
    task.exit_class = exit_class.value
    task.exit_code = reported_exit_code(result, exit_class)
    task.finished_at = now
    task.diagnostics = _diagnostics(result, exit_class)
    task.usage = dict(usage or {})
    spec = spec_of(job)
    limit = spec.role(task.role).task_retry_count
    retrying = (
        not job.stop_requested
        and job.completing is None
        and job.state == State.RUNNING.value
        and should_retry_task(exit_class, task.attempt - 1, limit)
    )
    record(
        session,
        job.id,
        now,
        "exited",
        f"{task.role}[{task.index}] attempt {task.attempt} exited: {exit_class.value} "
        f"(code {task.exit_code}){'; ' + task.diagnostics if task.diagnostics else ''}",
        task.role,
        task.index,
    )
    if retrying:
        _retry_in_place(session, task, limit, now)
        return
    current = State(task.state)
    if current is State.STOPPING:
        task.state = advance_task(current, TaskEvent.STOPPED).value
    else:
        target = task_state_for(exit_class)
        event = {State.SUCCEEDED: TaskEvent.SUCCEEDED, State.FAILED: TaskEvent.FAILED}.get(
            target, TaskEvent.STOP_REQUESTED
        )
        task.state = advance_task(current, event).value
        if State(task.state) is State.STOPPING:
            task.state = advance_task(State.STOPPING, TaskEvent.STOPPED).value
    settle_job(session, job, now, task)


def _retry_in_place(session: Session, task: Task, limit: int, now: float) -> None:
    task.state = advance_task(State(task.state), TaskEvent.RETRIED).value
    task.attempt += 1
    task.launch_acked = False
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


def _diagnostics(result: ProcessExit, exit_class: ExitClass) -> str:
    if result.launch_error:
        return f"could not launch: {result.launch_error}"
    if result.lost:
        return "the node or agent running it was lost"
    if exit_class is ExitClass.TIMEOUT:
        return "the job's max runtime was reached"
    if result.signal is not None:
        return f"killed by signal {result.signal}"
    return ""


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
    if tasks and all(State(t.state).is_terminal for t in tasks):
        if requeue_after_port_clash(session, job, now):
            return
        if job.completing == "preempted":
            job.state = advance_job(State.RUNNING, JobEvent.PREEMPTED).value
            record(
                session,
                job.id,
                now,
                "requeued",
                f"back in the queue after preemption for job {job.preempted_by}; it keeps "
                "its submission time, so its place",
            )
            job.completing = job.preempted_by = None
            job.version += 1
        elif job.completing == "retry":
            job.state = advance_job(State.RUNNING, JobEvent.RETRIED).value
            job.completing = None
            job.version += 1
            record(
                session,
                job.id,
                now,
                "requeued",
                f"attempt {job.attempt + 1} of {job.job_retry_count + 1} is queued",
            )
        elif job.state == State.STOPPING.value:
            job.state = advance_job(State.STOPPING, JobEvent.STOPPED).value
            job.version += 1
            job.completed_at = now
            job.exit_class = ExitClass.STOPPED.value
            record(session, job.id, now, "stopped", "every task has stopped")


def _apply_verdict(session: Session, job: Job, tasks: list[Task], now: float) -> None:
    spec = spec_of(job)
    policies = [
        RolePolicy(r.name, r.instances, r.completion.min_failed, r.completion.min_succeeded)
        for r in spec.roles
    ]
    verdict = judge(policies, [TaskOutcome(t.role, t.index, State(t.state)) for t in tasks])
    if verdict.verdict is JobVerdict.UNDECIDED:
        return
    job.diagnostics = verdict.reason
    if verdict.verdict is JobVerdict.SUCCEEDED:
        job.state = advance_job(State.RUNNING, JobEvent.SUCCEEDED).value
        job.exit_class, job.exit_code = ExitClass.SUCCEEDED.value, 0
    else:
        trigger = next((t for t in tasks if t.state == State.FAILED.value), None)
        job.exit_class = trigger.exit_class if trigger else ExitClass.USER_FAILURE.value
        job.exit_code = trigger.exit_code if trigger else None
        if job.attempt <= job.job_retry_count:
            job.completing = "retry"
            record(
                session,
                job.id,
                now,
                "failing",
                f"attempt {job.attempt} failed ({verdict.reason}); it will be retried",
            )
            request_kill(session, job.id, tasks)
            return
        job.state = advance_job(State.RUNNING, JobEvent.FAILED).value
    job.version += 1
    job.completed_at = now
    record(session, job.id, now, job.state.lower(), verdict.reason)
    request_kill(session, job.id, tasks)
