"""``/api/v1/jobs``: submit, list, inspect, stop, logs, events."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from sqlalchemy import select

from shoal.core.states import State
from shoal.core.why import blocking_jobs
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.schemas import (
    EventOut,
    JobDetail,
    JobSummary,
    LogChunk,
    PendingDetail,
    ProblemOut,
    StopResult,
    SubmitRequest,
    SubmittedJob,
)
from shoal.server.services import jobs as job_service
from shoal.server.services.accounting import job_accounts
from shoal.server.services.logs import read_chunk
from shoal.server.services.snapshot import load_snapshot, request_of
from shoal.server.services.views import job_detail, job_events, job_summary
from shoal.store.models import Job, Task

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

JobState = Literal["WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED"]


@router.post("", status_code=201, response_model=list[SubmittedJob])
def submit_job(body: SubmitRequest, ctx: Context, caller: Caller) -> list[SubmittedJob]:
    """Submit a job file. The job is stored durably before this answers."""
    ids, warnings, names = job_service.submit(ctx, caller, body)
    return [
        SubmittedJob(
            id=job_id,
            name=name,
            state=State.WAITING.value,  # as committed; the scheduler may have placed it since
            warnings=[ProblemOut(**w) for w in warnings],
        )
        for job_id, name in zip(ids, names, strict=True)
    ]


@router.get("", response_model=list[JobSummary])
def list_jobs(
    ctx: Context,
    caller: Caller,
    state: Annotated[list[JobState] | None, Query()] = None,
    user: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[JobSummary]:
    """Jobs, newest first. Non-admins see their own jobs."""
    query = select(Job).order_by(Job.seq.desc()).limit(limit).offset(offset)
    if not caller.is_admin:
        query = query.where(Job.user == caller.user)
    elif user is not None:
        query = query.where(Job.user == user)
    if state:
        query = query.where(Job.state.in_(state))
    with ctx.db.read() as session:
        found = list(session.scalars(query))
        accounts = job_accounts(session, found, ctx.clock())
        summaries = [job_summary(job, ctx.positions.get(job.id)) for job in found]
    for summary in summaries:
        summary.accounting = accounts[summary.id]
    return summaries


@router.get("/{job}", response_model=JobDetail)
def get_job(job: str, ctx: Context, caller: Caller) -> JobDetail:
    """One job with its current attempt's tasks. ``job`` is an id or a name."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        detail = job_detail(session, found, ctx.positions.get(found.id))
        detail.accounting = job_accounts(session, [found], ctx.clock())[found.id]
        return detail


@router.get("/{job}/pending-reason", response_model=PendingDetail)
def pending_reason(job: str, ctx: Context, caller: Caller) -> PendingDetail:
    """Why a job waits: reason, queue position in its VC, and what stands in its way."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        blockers: list[str] | None = []
        if found.state == State.WAITING.value:
            snapshot, _ = load_snapshot(ctx, session)
            blockers = blocking_jobs(snapshot, request_of(ctx, found))
        preempting = list(session.scalars(select(Job.id).where(Job.preempted_by == found.id)))
        return PendingDetail(
            id=found.id,
            state=found.state,
            virtualCluster=found.virtual_cluster,
            code=found.pending_code,
            message=found.pending_message,
            position=ctx.positions.get(found.id),
            blockers=blockers,
            preempting=preempting,
        )


@router.post("/{job}/stop", response_model=StopResult, status_code=202)
def stop_job(job: str, ctx: Context, caller: Caller) -> StopResult:
    """Stop a job: SIGTERM to every task's process group, SIGKILL after the grace period."""
    stopped = job_service.stop(ctx, caller, job)
    return StopResult(id=stopped.id, state=stopped.state)


@router.get("/{job}/events", response_model=list[EventOut])
def get_events(job: str, ctx: Context, caller: Caller) -> list[EventOut]:
    with ctx.db.read() as session:
        return job_events(session, job_service.find_job(session, caller, job))


@router.get("/{job}/logs", response_model=LogChunk)
def get_logs(
    job: str,
    ctx: Context,
    caller: Caller,
    role: str | None = None,
    index: Annotated[int, Query(ge=0)] = 0,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int, Query(ge=0)] = 0,
    attempt: Annotated[int | None, Query(ge=1)] = None,
) -> LogChunk:
    """A chunk of one task's log from ``offset``; poll with ``nextOffset`` to follow."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        query = select(Task).where(Task.job_id == found.id, Task.job_attempt == found.attempt)
        if role is not None:
            query = query.where(Task.role == role, Task.index == index)
        task = session.scalars(query.order_by(Task.id)).first()
        if task is None:
            what = f"task {role}/{index}" if role else "any task"
            raise ApiError(404, "NoTaskError", f"job {found.id} has no {what} (yet)")
        return read_chunk(ctx, task, stream, offset, attempt)
