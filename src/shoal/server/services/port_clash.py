"""A launch refused because one of the task's ports was taken on the host (the agent probes each
port just before it launches): the job's gang goes back to the queue to be placed on free ports.

Retrying in place would keep the same ports, so the whole attempt is ended instead: the refused
task ends as a platform failure, its siblings are stopped, and once every task of the attempt
has ended the job returns to the queue, keeping its submission time (like a preemption; the
lifecycle counts it as a "resource" retry, which does not use up the job's retries). The
agent reports the port as busy with the same report, so the scheduler does not hand it out
again. This requeue is the platform's doing: it is made whatever the job's retry count, at most
``MAX_PORT_REQUEUES`` times per job; after that the refusal is an ordinary launch failure.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.server.services.events import record
from shoal.server.services.stopping import request_kill
from shoal.store.models import Event, Job, Task

PORT_CLASH = "port_clash"  # ``Job.completing`` while the attempt's tasks end
CLASH_EVENT = "port-clash"
MAX_PORT_REQUEUES = 5


def mark_port_clash(session: Session, task: Task, port: int, now: float) -> bool:
    """Before the refused task's exit is applied: end the whole attempt so the job is placed
    again. False (nothing done) if the job is already on another course or has been requeued
    for taken ports too often."""
    job = session.get(Job, task.job_id)
    if job is None or job.state != State.RUNNING.value or task.job_attempt != job.attempt:
        return False
    if job.completing is not None or job.stop_requested or State(task.state).is_terminal:
        return False
    clashes = session.scalar(
        select(func.count(Event.id)).where(Event.job_id == job.id, Event.kind == CLASH_EVENT)
    )
    if (clashes or 0) >= MAX_PORT_REQUEUES:
        return False
    job.completing = PORT_CLASH
    job.version += 1
    record(
        session,
        job.id,
        now,
        CLASH_EVENT,
        f"{task.role}[{task.index}] was not launched on {task.node}: its port {port} is in "
        f"use by another process; the job goes back to the queue to be placed on free ports "
        f"(requeue {(clashes or 0) + 1} of at most {MAX_PORT_REQUEUES}; it does not use up "
        "the job's retries)",
        task.role,
        task.index,
    )
    siblings = session.scalars(
        select(Task).where(
            Task.job_id == job.id, Task.job_attempt == task.job_attempt, Task.id != task.id
        )
    )
    request_kill(session, job.id, list(siblings))
    return True
