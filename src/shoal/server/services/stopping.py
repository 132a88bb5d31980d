"""Stopping jobs: one job, or an array with all its elements at once (docs/arrays.md).

A waiting job ends at once (STOPPED, it holds nothing); a running one goes to STOPPING and its
agents are told to kill its tasks; it ends when they have exited (``lifecycle.settle_job``)."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shoal.core.lifecycle import StopCause, stopped_job
from shoal.core.states import JobEvent, State, TaskEvent, advance_job, advance_task
from shoal.server.notify import note_news
from shoal.server.services.arrays import element_counts, element_ended, settle_parent
from shoal.server.services.events import record
from shoal.store.models import Job, Task

_UNFINISHED = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)
_STOPPED = advance_job(State.WAITING, JobEvent.STOP_REQUESTED).value


def request_kill(session: Session, job_id: str, tasks: list[Task] | None = None) -> None:
    """Ask the agents to end every unfinished task of the job (``tasks``: its unfinished tasks
    if the caller has them already)."""
    if tasks is None:
        tasks = list(session.scalars(select(Task).where(Task.job_id == job_id)))
    for task in tasks:
        state = State(task.state)
        if state.is_terminal:
            continue
        task.kill_requested = True
        note_news(session, [task.node])
        if state is State.RUNNING:
            task.state = advance_task(state, TaskEvent.STOP_REQUESTED).value


def stop_job(session: Session, job: Job, who: str, now: float, settle_array: bool = True) -> None:
    """Stop one job (not an array's parent: ``stop_array``). ``settle_array``: if the job is an
    element that ends at once, let its array release the next element and move on."""
    state = State(job.state)
    if state.is_terminal or state is State.STOPPING:
        return
    job.stop_requested = True
    job.version += 1
    end = stopped_job(StopCause.USER, who)
    job.diagnostics = end.diagnostics
    if state is State.WAITING and job.completing is None:
        job.state = advance_job(state, JobEvent.STOP_REQUESTED).value
        job.completed_at = now
        job.exit_class, job.exit_code = end.exit_class.value, end.exit_code
        job.pending_code = job.pending_message = None
        job.array_held = False
        record(session, job.id, now, "stopped", f"stopped by {who} while waiting")
        if settle_array:
            element_ended(session, job, now)
    else:
        job.state = State.STOPPING.value if state is State.RUNNING else job.state
        request_kill(session, job.id)
        record(session, job.id, now, "stopping", f"stop requested by {who}")


def stop_array(session: Session, parent: Job, who: str, now: float) -> None:
    """Stop every element of an array together: the waiting ones (held or queued) end at once,
    in one statement; the running ones are stopped like any job. The parent is STOPPING until
    the last of them has ended, then STOPPED."""
    if State(parent.state).is_terminal or parent.stop_requested:
        return
    end = stopped_job(StopCause.USER, who)
    parent.stop_requested = True
    parent.version += 1
    parent.diagnostics = end.diagnostics
    cancelled = session.execute(
        update(Job)
        .where(
            Job.array_job_id == parent.id,
            Job.state == State.WAITING.value,
            Job.completing.is_(None),
        )
        .values(
            state=_STOPPED,
            stop_requested=True,
            version=Job.version + 1,
            completed_at=now,
            exit_class=end.exit_class.value,
            exit_code=end.exit_code,
            diagnostics=f"{end.diagnostics} (array {parent.id} was stopped)",
            pending_code=None,
            pending_message=None,
            array_held=False,
        )
        .returning(Job.id)
    ).scalars()
    for job_id in cancelled:
        record(session, job_id, now, "stopped", f"stopped by {who} while waiting (array stop)")
    unfinished = select(Job).where(Job.array_job_id == parent.id, Job.state.in_(_UNFINISHED))
    for element in session.scalars(unfinished):
        stop_job(session, element, who, now, settle_array=False)
    record(session, parent.id, now, "stopping", f"stop of the whole array requested by {who}")
    session.flush()
    settle_parent(
        session, parent, element_counts(session.connection(), [parent.id])[parent.id], now
    )
