"""Failed tasks held for debugging (docs/debug-jobs.md): what the server notes, and releases.

A debug task whose command fails stays RUNNING for the scheduler (its resources stay reserved and
counted against its VC) while its agent keeps its environment up and reports it held, with its
command's exit code and when the agent ends the hold by itself. The agent is the hold's owner:
it knows when the command failed and ends the hold when its time runs out, even while the server
is away. The server keeps the attempts its agents report held (``ServerContext.held``, refreshed
by every report), writes the command's exit code and the hold's end on the task (its
``exit_code`` and ``diagnostics``, as the user reads them in ``shoal job status``), records an
event, and asks the agent to end a hold early (``shoal job release``): a kill order for a held
attempt ends the hold, and the task then ends as its command did (FAILED with its exit code),
under the job's completion policy and retries as without the hold.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.protocol import RunningReport
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.notify import note_news, noted_news
from shoal.server.services import audit
from shoal.server.services.events import record
from shoal.server.services.jobs import find_job
from shoal.store.models import Job, Task

HELD_PREFIX = "held for debugging"
_LIVE = (State.RUNNING.value, State.STOPPING.value)


def shown_time(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def held_diagnostics(job: str, task: Task, code: int, until: float) -> str:
    """What the task says while held: its command's exit code, until when, and the way out."""
    return (
        f"{HELD_PREFIX} until {shown_time(until)}: its command exited {code}; "
        f"`shoal job release {job} --task {task.role}/{task.index}` frees it"
    )


def newly_held(ctx: ServerContext, running: RunningReport) -> bool:
    """Whether the report says something about a hold the server has not noted yet."""
    return running.held_until is not None and ctx.held.get(running.attempt_id) != (
        running.held_until
    )


def note_hold(
    ctx: ServerContext, session: Session, task: Task, running: RunningReport, now: float
) -> None:
    """Write a hold the agent reports on its task, with an event the first time."""
    if running.held_exit_code is None or running.held_until is None:
        return
    ctx.held[running.attempt_id] = running.held_until
    message = held_diagnostics(task.job_id, task, running.held_exit_code, running.held_until)
    if task.diagnostics == message:
        return  # noted before (this server ran before the agent's report)
    task.exit_code = running.held_exit_code
    task.diagnostics = message
    record(
        session,
        task.job_id,
        now,
        "held",
        f"{task.role}[{task.index}] exited {running.held_exit_code}; {HELD_PREFIX} until "
        f"{shown_time(running.held_until)}; `shoal job release {task.job_id}` frees it",
        task.role,
        task.index,
    )


def hold_ended(
    ctx: ServerContext, session: Session, task: Task, attempt_id: str, now: float
) -> None:
    """The held attempt has exited: by its release, or because its time ran out."""
    if ctx.held.pop(attempt_id, None) is None or task.kill_requested:
        return  # not held, or released (said when it was)
    record(
        session,
        task.job_id,
        now,
        "released",
        f"{task.role}[{task.index}]: its hold for debugging ran out",
        task.role,
        task.index,
    )


def held_tasks(ctx: ServerContext, session: Session, job: Job) -> list[Task]:
    """The job's tasks its agents report held, and not yet asked to end."""
    tasks = session.scalars(
        select(Task).where(
            Task.job_id == job.id, Task.job_attempt == job.attempt, Task.state.in_(_LIVE)
        )
    )
    return [t for t in tasks if t.attempt_id in ctx.held and not t.kill_requested]


def release(
    ctx: ServerContext, principal: Principal, ref: str, task: str | None
) -> tuple[str, list[str]]:
    """End the holds of the job's held tasks (``task``: ROLE/INDEX, only that one) at once;
    returns the job's id and the tasks released, as ROLE/INDEX."""
    now = ctx.clock()
    with ctx.db.write() as session:
        job = find_job(session, principal, ref)
        held = held_tasks(ctx, session, job)
        if task is not None:
            held = [t for t in held if f"{t.role}/{t.index}" == task]
        if not held:
            raise _not_held(job, task)
        for one in held:
            one.kill_requested = True  # a kill order for a held attempt ends its hold
            note_news(session, [one.node])
            record(
                session,
                job.id,
                now,
                "released",
                f"{one.role}[{one.index}]: hold released by {principal.user}",
                one.role,
                one.index,
            )
        if job.user != principal.user:
            detail = {"owner": job.user, "tasks": [f"{t.role}/{t.index}" for t in held]}
            audit.record(session, now, principal, "job.release", f"job {job.id}", detail)
        released = [f"{t.role}/{t.index}" for t in held]
        job_id = job.id
    ctx.wake_agents(noted_news(session))
    return job_id, released


def _not_held(job: Job, task: str | None) -> ApiError:
    what = f"task {task} of job {job.id}" if task else f"job {job.id}"
    return ApiError(
        409,
        "NotHeldError",
        f"{what} has no task held for debugging (job state {job.state}): only a failed task "
        "of a role with debug: true is held",
        [{"path": "task" if task else "job", "message": "not held"}],
    )
