"""Exec sessions' use cases (docs/terminal.md): who may open one in which task, the audit log
(``exec_sessions``) written as each starts and ends, and reading it back.

The socket side (the rendezvous with the agent, the relay) is ``server.exec_hub``; the routes
are ``routers.exec``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.protocol import ExecOrder
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.exec_hub import SERVER_RESTARTED, LiveSession
from shoal.server.node_auth import FORBIDDEN_NODE
from shoal.server.services import audit
from shoal.server.services.jobs import find_job
from shoal.server.services.snapshot import spec_of
from shoal.store.models import ExecSessionRow, Job, Task


@dataclass(frozen=True)
class ExecRequest:
    """What a user asked for: the task (None: the job's first), the command, the terminal."""

    task: tuple[str, int] | None
    argv: list[str]
    tty: bool
    cols: int
    rows: int


@dataclass(frozen=True)
class ExecTarget:
    """The running task a session opens in, and the order its agent gets."""

    order: ExecOrder
    node: str
    job_id: str
    role: str
    index: int


def begin(
    ctx: ServerContext, principal: Principal, job_ref: str, request: ExecRequest, session_id: str
) -> ExecTarget:
    """Authorise the session and write its audit row: only the job's owner or an admin, only a
    RUNNING task. ``session_id`` must be reserved in the hub first (``close_orphans``)."""
    now = ctx.clock()
    with ctx.db.write() as session:
        job = _job(session, principal, job_ref)
        task = current_task(session, job, request.task)
        if task.state != State.RUNNING.value:
            raise ApiError(409, "TaskNotRunningError", not_running_message(job, task))
        order = ExecOrder(
            session_id=session_id,
            attempt_id=task.attempt_id,
            argv=request.argv,
            tty=request.tty,
            cols=request.cols,
            rows=request.rows,
        )
        session.add(
            ExecSessionRow(
                id=session_id,
                user=principal.user,
                job_id=job.id,
                role=task.role,
                index=task.index,
                attempt_id=task.attempt_id,
                node=task.node,
                argv=list(request.argv),
                tty=request.tty,
                started_at=now,
            )
        )
        audited = f"job {job.id} task {task.role}/{task.index}"
        detail = {"session": session_id, "owner": job.user, "argv": list(request.argv)}
        audit.record(session, now, principal, "exec.open", audited, detail)
        return ExecTarget(order, task.node, job.id, task.role, task.index)


def _job(session: Session, principal: Principal, ref: str) -> Job:
    """The job, if the caller may open a terminal in it: another user's job is a refusal that
    says whose it is (its summary is public in the job list), not a 404."""
    job = session.get(Job, ref)
    if job is not None and not (principal.is_admin or job.user == principal.user):
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"job {ref} is {job.user}'s: only its owner or an admin may run commands in its "
            f"tasks (you are {principal.user})",
        )
    return job if job is not None else find_job(session, principal, ref)


def current_task(session: Session, job: Job, wanted: tuple[str, int] | None) -> Task:
    """The task of the job's current attempt (``wanted`` None: index 0 of its first role)."""
    if job.array_size is not None:
        raise ApiError(
            409,
            "NoTaskError",
            f"job {job.id} is an array: open a terminal in one of its elements "
            f"(`shoal job status {job.id}` lists them)",
        )
    role, index = wanted if wanted is not None else (spec_of(job).roles[0].name, 0)
    task = session.scalars(
        select(Task)
        .where(Task.job_id == job.id, Task.role == role, Task.index == index)
        .order_by(Task.job_attempt.desc(), Task.id.desc())
        .limit(1)
    ).first()
    if task is None:
        roles = ", ".join(f"{r.name} (0..{r.instances - 1})" for r in spec_of(job).roles)
        hint = f"its roles: {roles}" if roles else "it has not been placed yet"
        raise ApiError(404, "NoTaskError", f"job {job.id} has no task {role}/{index}; {hint}")
    return task


def not_running_message(job: Job, task: Task) -> str:
    what = f"task {task.role}/{task.index} of job {job.id} is {task.state}"
    if task.state == State.WAITING.value:
        return (
            f"{what}: it has not started yet; try again once it runs (`shoal job status {job.id}`)"
        )
    if task.state == State.STOPPING.value:
        return f"{what}: it is being stopped"
    return f"{what}: it has ended; its output is in `shoal job logs {job.id}`"


def check_attach(
    live: LiveSession[Any] | None, agent: Principal, session_id: str
) -> LiveSession[Any]:
    """The session an agent attaches to: it must be open, waiting for its agent, and (a node
    certificate) on the agent's own node."""
    if live is None:
        raise ApiError(
            404,
            "NoExecSessionError",
            f"no exec session {session_id} is waiting for its agent (it ended, or timed out)",
        )
    if agent.node is not None and agent.node != live.node:
        raise ApiError(
            403,
            FORBIDDEN_NODE,
            f"exec session {session_id} runs in a task on node {live.node}: the certificate of "
            f"node {agent.node} acts only for its own node",
        )
    return live


def end(ctx: ServerContext, session_id: str, reason: str, exit_code: int | None = None) -> None:
    """Record the session's end (once: a session already ended keeps its first end)."""
    with ctx.db.write() as session:
        session.execute(
            update(ExecSessionRow)
            .where(ExecSessionRow.id == session_id, ExecSessionRow.ended_at.is_(None))
            .values(ended_at=ctx.clock(), end_reason=reason, exit_code=exit_code)
        )


def close_orphans(ctx: ServerContext, live: set[str]) -> int:
    """End the sessions an earlier server process left open (it stopped without recording their
    end): every open row that is not one of this process's ``live`` sessions. Their end time is
    when this was noticed. Returns how many."""
    with ctx.db.read() as session:
        open_ids = set(
            session.scalars(select(ExecSessionRow.id).where(ExecSessionRow.ended_at.is_(None)))
        )
    orphans = sorted(open_ids - live)
    if not orphans:
        return 0
    with ctx.db.write() as session:
        session.execute(
            update(ExecSessionRow)
            .where(ExecSessionRow.id.in_(orphans), ExecSessionRow.ended_at.is_(None))
            .values(ended_at=ctx.clock(), end_reason=SERVER_RESTARTED)
        )
    return len(orphans)


def audit_log(
    ctx: ServerContext,
    principal: Principal,
    live: set[str],
    limit: int,
    job: str | None = None,
    user: str | None = None,
) -> list[ExecSessionRow]:
    """Sessions, newest first: an admin's view has everyone's (``user``: one user's), anyone
    else's their own."""
    close_orphans(ctx, live)
    if user is not None and user != principal.user and not principal.is_admin:
        raise ApiError(403, "ForbiddenUserError", "only admins read other users' exec sessions")
    query = select(ExecSessionRow)
    if not principal.is_admin:
        query = query.where(ExecSessionRow.user == principal.user)
    elif user is not None:
        query = query.where(ExecSessionRow.user == user)
    if job is not None:
        query = query.where(ExecSessionRow.job_id == job)
    query = query.order_by(ExecSessionRow.started_at.desc(), ExecSessionRow.id).limit(limit)
    with ctx.db.read() as session:
        rows = list(session.scalars(query))
        session.expunge_all()
    return rows
