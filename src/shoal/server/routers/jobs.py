"""``/api/v1/jobs``: submit, list, inspect, stop, logs, events."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.orm import Session, defer

from shoal.core.arrays import held_at_submission
from shoal.core.states import State
from shoal.core.why import blocking_jobs
from shoal.server.autoscaling.views import waiting_lines
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.limits import SQL_INT_MAX
from shoal.server.positions import Positions, position_of, positions_of
from shoal.server.schemas import (
    ArrayOut,
    EventOut,
    JobDetail,
    JobSource,
    JobSummary,
    LogChunk,
    PendingDetail,
    PlanOut,
    PlanRequest,
    ProblemOut,
    ReleaseRequest,
    ReleaseResult,
    StopResult,
    SubmitRequest,
    SubmittedJob,
)
from shoal.server.services import debug_holds, submission
from shoal.server.services import jobs as job_service
from shoal.server.services.accounting import job_accounts
from shoal.server.services.arrays import element_counts, no_logs_of_a_parent
from shoal.server.services.dryrun import plan_jobs
from shoal.server.services.logs import read_chunk
from shoal.server.services.nodes import HOLDING
from shoal.server.services.snapshot import load_snapshot, request_of
from shoal.server.services.views import (
    array_out,
    job_detail,
    job_events,
    job_refs,
    job_summary,
    nodes_of,
)
from shoal.store.models import Job, Task

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

# SQLite integers are 64-bit: a larger offset was an OverflowError (a 500) in the query
JOB_STATES = ("WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED")
# A summary needs none of these: a page of 10,000 jobs does not read their job files.
_SUMMARY_ONLY = tuple(
    defer(column)
    for column in (
        Job.source_text,
        Job.secrets,
        Job.inherited_env,
        Job.data_sets,
        Job.diagnostics,
        Job.submit_dir,
    )
)
# ``sort`` keys of the job list; ``-KEY`` sorts descending. Ties go newest first.
_SORT_KEYS = {
    "submitted": Job.seq,
    "name": Job.name,
    "state": Job.state,
    "user": Job.user,
    "vc": Job.virtual_cluster,
    "priority": Job.priority,
}
SORTS = tuple(k for key in _SORT_KEYS for k in (key, f"-{key}"))
_SUMMARIES = select(Job).options(*_SUMMARY_ONLY).where(Job.id.in_(bindparam("ids", expanding=True)))
# A page is summarised this many jobs at a time: the job rows of a 10,000-job page at once were
# 85 MiB of the API process's peak (bench/api.py, "Memory with 100,000 finished jobs").
_SUMMARY_CHUNK = 500


@router.post("", status_code=201, response_model=list[SubmittedJob])
async def submit_job(body: SubmitRequest, ctx: Context, caller: Caller) -> list[SubmittedJob]:
    """Submit a job file (with ``array``: as a job array, docs/arrays.md). The job is stored
    durably before this answers."""
    done = await submission.submit_grouped(ctx, caller, body)
    array = None
    if done.array is not None:
        size, cap = done.array.size, done.array.cap
        array = ArrayOut(
            expression=done.array.expression,
            size=size,
            cap=cap,
            counts={State.WAITING.value: size},
            held=held_at_submission(size, cap),
        )
    return [
        SubmittedJob(
            id=job_id,
            name=name,
            state=State.WAITING.value,  # as committed; the scheduler may have placed it since
            warnings=[ProblemOut(**w) for w in done.warnings],
            array=array,
        )
        for job_id, name in zip(done.ids, done.names, strict=True)
    ]


@router.get("", response_model=list[JobSummary])
def list_jobs(
    ctx: Context,
    caller: Caller,
    response: Response,
    state: Annotated[
        list[str] | None, Query(description=f"Only jobs in these states: {', '.join(JOB_STATES)}.")
    ] = None,
    user: Annotated[
        str | None, Query(description="Only this user's jobs; `all`: every user's.")
    ] = None,
    allUsers: Annotated[
        bool, Query(description="Every user's jobs (summaries only), for every caller.")
    ] = False,
    since: Annotated[
        float | None, Query(description="Only jobs submitted at or after (epoch seconds).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    offset: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,
    q: Annotated[
        str | None, Query(max_length=200, description="Only jobs whose name or id contains this.")
    ] = None,
    vc: Annotated[str | None, Query(description="Only jobs in this virtual cluster.")] = None,
    sort: Annotated[
        str, Query(description=f"Order: {', '.join(SORTS)} (``-``: descending).")
    ] = "-submitted",
    total: Annotated[
        bool, Query(description="Count every match too: the X-Total-Count header.")
    ] = False,
) -> list[JobSummary]:
    """Jobs, newest first. By default non-admins see their own jobs and admins everyone's; with
    ``allUsers`` (or ``user=all``) or ``user=NAME`` anyone sees the summaries of everyone's (or
    NAME's) jobs, the queue they wait in. Commands, logs and events stay the owner's. An array
    is listed once, by its parent, with its elements counted by state (the elements are in
    ``GET /api/v1/jobs/{parent}``)."""
    bad = [s for s in state or [] if s not in JOB_STATES]
    if bad:
        raise ApiError(
            422,
            "InvalidParametersError",
            f"state: {bad[0]!r} is not a job state; use one of {', '.join(JOB_STATES)}",
        )
    if sort not in SORTS:
        raise ApiError(
            422, "InvalidParametersError", f"sort: {sort!r} is not one of {', '.join(SORTS)}"
        )
    column = _SORT_KEYS[sort.lstrip("-")]
    query = select(Job.id).where(Job.array_job_id.is_(None))
    if user is not None and user != "all":
        query = query.where(Job.user == user)
    elif not (allUsers or user == "all" or caller.is_admin):
        query = query.where(Job.user == caller.user)
    if state:
        query = query.where(Job.state.in_(state))
    if since is not None:
        query = query.where(Job.submitted_at >= since)
    if vc:
        query = query.where(Job.virtual_cluster == vc)
    if q:
        pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(
            or_(Job.name.like(pattern, escape="\\"), Job.id.like(pattern, escape="\\"))
        )
    order = column.desc() if sort.startswith("-") else column.asc()
    page = query.order_by(order, Job.seq.desc()).limit(limit).offset(offset)
    with ctx.db.read() as session:
        if total:
            count = session.scalar(select(func.count()).select_from(query.subquery()))
            response.headers["X-Total-Count"] = str(count or 0)
        # The page's ids first, then its rows: sorting ids is cheap, sorting whole rows (job
        # files, specs) of every match before the limit is not.
        ids = list(session.scalars(page))
        now, positions = ctx.clock(), ctx.queue_positions()
        summaries: list[JobSummary] = []
        for start in range(0, len(ids), _SUMMARY_CHUNK):
            chunk = ids[start : start + _SUMMARY_CHUNK]
            summaries += _summaries(session, chunk, now, positions)
    return summaries


def _summaries(
    session: Session, ids: list[str], now: float, positions: Positions
) -> list[JobSummary]:
    """The summaries of jobs ``ids``, in that order (their rows are let go on return)."""
    loaded = {j.id: j for j in session.scalars(_SUMMARIES, {"ids": ids})}
    jobs = [loaded[job_id] for job_id in ids if job_id in loaded]
    nodes = nodes_of(session, jobs)
    accounts = job_accounts(session, jobs, now)
    parents = [j.id for j in jobs if j.array_size is not None]
    counts = element_counts(session.connection(), parents)
    places = positions_of(positions, jobs)
    summaries = [
        job_summary(j, places.get(j.id), nodes.get(j.id, ()), counts.get(j.id)) for j in jobs
    ]
    for summary in summaries:
        summary.accounting = accounts[summary.id]
    return summaries


@router.post("/plan", response_model=list[PlanOut])
def plan_job(body: PlanRequest, ctx: Context, caller: Caller) -> list[PlanOut]:
    """Dry run on the cluster as it is (its nodes, running allocations and queue): would the
    job start now, where, or why not. Nothing is stored."""
    return plan_jobs(ctx, caller, body)


@router.get("/{job}", response_model=JobDetail)
def get_job(job: str, ctx: Context, caller: Caller) -> JobDetail:
    """One job with its current attempt's tasks. ``job`` is an id or a name."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        detail = job_detail(session, found, position_of(ctx.queue_positions(), found))
        detail.accounting = job_accounts(session, [found], ctx.clock())[found.id]
        return detail


@router.get("/{job}/source", response_model=JobSource)
def get_source(job: str, ctx: Context, caller: Caller) -> JobSource:
    """The job file as it was submitted (its owner and admins), its secrets shown as ******."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        return JobSource(
            id=found.id,
            name=found.name,
            format=found.source_format,
            text=job_service.masked_source(found.source_text, found.secrets or {}),
            virtualCluster=found.virtual_cluster,
        )


@router.get("/{job}/pending-reason", response_model=PendingDetail)
def pending_reason(job: str, ctx: Context, caller: Caller) -> PendingDetail:
    """Why a job waits: reason, queue position in its VC, and what stands in its way."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        blockers: list[str] | None = []
        queued = not found.array_held and found.missing_image is None  # the scheduler's
        if found.state == State.WAITING.value and queued:
            snapshot, _ = load_snapshot(ctx, session)
            blockers = blocking_jobs(snapshot, request_of(ctx, found))
        preempting = list(session.scalars(select(Job.id).where(Job.preempted_by == found.id)))
        held = _gpus_held(session, [*(blockers or []), *preempting])
        return PendingDetail(
            id=found.id,
            state=found.state,
            virtualCluster=found.virtual_cluster,
            code=found.pending_code,
            message=found.pending_message,
            position=position_of(ctx.queue_positions(), found),
            blockers=blockers,
            preempting=preempting,
            blockerDetails=None if blockers is None else job_refs(session, blockers, held),
            preemptingDetails=job_refs(session, preempting, held),
            pools=waiting_lines(ctx, found.id),
        )


def _gpus_held(session: Session, job_ids: list[str]) -> dict[str, int]:
    """GPUs each of these jobs' unfinished tasks hold."""
    held: dict[str, int] = {}
    if not job_ids:
        return held
    rows = session.execute(
        select(Task.job_id, Task.gpu_indices).where(
            Task.job_id.in_(job_ids), Task.state.in_(HOLDING)
        )
    )
    for job_id, gpus in rows:
        held[job_id] = held.get(job_id, 0) + len(gpus)
    return held


@router.post("/{job}/stop", response_model=StopResult, status_code=202)
def stop_job(job: str, ctx: Context, caller: Caller) -> StopResult:
    """Stop a job: SIGTERM to every task's process group, SIGKILL after the grace period."""
    stopped = job_service.stop(ctx, caller, job)
    array = None
    if stopped.array_size is not None:
        with ctx.db.read() as session:
            array = array_out(
                stopped, element_counts(session.connection(), [stopped.id])[stopped.id]
            )
    return StopResult(id=stopped.id, state=stopped.state, array=array)


@router.post("/{job}/release", response_model=ReleaseResult, status_code=202)
def release_job(
    job: str, ctx: Context, caller: Caller, body: ReleaseRequest | None = None
) -> ReleaseResult:
    """End the hold of the job's tasks held for debugging (docs/debug-jobs.md): each then ends
    as its command did. 409 NotHeldError when none is held."""
    task = body.task if body is not None else None
    job_id, released = debug_holds.release(ctx, caller, job, task)
    return ReleaseResult(id=job_id, released=released)


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
    index: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,
    attempt: Annotated[int | None, Query(ge=1, le=SQL_INT_MAX)] = None,
) -> LogChunk:
    """A chunk of one task's log from ``offset``; poll with ``nextOffset`` to follow."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        no_logs_of_a_parent(found)
        query = select(Task).where(Task.job_id == found.id, Task.job_attempt == found.attempt)
        if role is not None:
            query = query.where(Task.role == role, Task.index == index)
        task = session.scalars(query.order_by(Task.id)).first()
        if task is None:
            what = f"task {role}/{index}" if role else "any task"
            raise ApiError(404, "NoTaskError", f"job {found.id} has no {what} (yet)")
        return read_chunk(ctx, task, stream, offset, attempt)
