"""OpenPAI v2 job history: a task's attempts, their log locations, the job's events, and the
deprecated ``job-attempts`` routes (every attempt of the job in ``JobAttempt`` shape, which
OpenPAI's SDK still calls).

shoal's job events become OpenPAI's (Kubernetes-style) events: ``reason`` is shoal's event kind,
``type`` is ``Warning`` for kinds that report trouble, times are ISO 8601 UTC, each event counts 1.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.limits import SQL_INT_MAX
from shoal.server.openpai import logurls, views
from shoal.server.openpai.errors import answering
from shoal.server.openpai.lookup import find_job
from shoal.store.models import Event, Job, Task

router = APIRouter(prefix="/api/v2", tags=["openpai"])
WARNINGS = frozenset(
    {"pending", "failing", "preempted", "replanned", "requeued", "port-clash", "lost", "exited"}
)
TASK_PATH = "/jobs/{framework}/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts"


def _task_attempts(session: Session, job: Job, attempt: int, role: str, index: int) -> list[Task]:
    query = select(Task).where(
        Task.job_id == job.id,
        Task.job_attempt == attempt + 1,
        Task.role == role,
        Task.index == index,
    )
    return list(session.scalars(query.order_by(Task.attempt)))


# SQLite integers are 64-bit: a larger one in a query was an OverflowError (a 500)
DbInt = Annotated[int, Path(ge=0, le=SQL_INT_MAX)]


@router.get(TASK_PATH, response_model=None)
def task_attempts(
    framework: str, attempt: DbInt, role: str, index: DbInt, ctx: Context, caller: Caller
) -> dict[str, Any]:
    """One task of one job attempt, with every attempt of the task (``TaskStatus``)."""
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        tasks = _task_attempts(session, job, attempt, role, index)
        if not tasks:
            raise ApiError(
                404,
                "NoTaskError",
                f"job {framework} has no task {role}[{index}] in attempt {attempt}",
            )
        status = views.task_status(tasks[-1], job)
    keep = ("taskIndex", "taskUid", "taskState", "retries", "accountableRetries", "completedTime")
    return {
        **{k: status[k] for k in keep},
        "createdTime": views.ms(tasks[0].created_at),  # the task's first attempt's
        "launchedTime": views.ms(tasks[0].started_at),
        "username": job.user,
        "jobName": job.name,
        "jobAttemptId": attempt,
        "taskRoleName": role,
        "attempts": [
            {
                "attemptId": task.attempt - 1,
                "attemptState": task.state,
                "currentAttemptCreatedTime": views.ms(task.created_at),
                "currentAttemptLaunchedTime": views.ms(task.started_at),
                "currentAttemptCompletedTime": views.ms(task.finished_at),
                **views.container(task, job),
            }
            for task in tasks
        ],
    }


@router.get(TASK_PATH + "/{task_attempt}/logs", response_model=None)
def task_logs(
    framework: str,
    attempt: DbInt,
    role: str,
    index: DbInt,
    task_attempt: DbInt,
    request: Request,
    ctx: Context,
    caller: Caller,
) -> dict[str, Any]:
    """Where one task attempt's stdout and stderr are: URLs readable as they are for an hour,
    as OpenPAI's log manager's are (``logurls.py``)."""
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        tasks = _task_attempts(session, job, attempt, role, index)
        if not any(task.attempt == task_attempt + 1 for task in tasks):
            raise ApiError(
                404,
                "NoTaskLogError",
                f"job {framework} has no logs of {role}[{index}] attempt {task_attempt} in job "
                f"attempt {attempt}",
            )
    return {"locations": logurls.locations(ctx, str(request.base_url), tasks[-1], task_attempt + 1)}


@router.get("/jobs/{framework}/events", response_model=None)
def job_events(
    framework: str, ctx: Context, caller: Caller, type: str | None = None
) -> dict[str, Any]:
    """The job's events, oldest first; ``type``: only ``Normal`` or only ``Warning`` ones."""
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        rows = session.scalars(
            select(Event).where(Event.job_id == job.id).order_by(Event.at, Event.id)
        ).all()
    events = [_event(job, row) for row in rows]
    if type:
        events = [event for event in events if event["type"] == type]
    return {"totalCount": len(events), "data": events}


def _event(job: Job, row: Event) -> dict[str, Any]:
    stamp = dt.datetime.fromtimestamp(row.at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    task = f"{job.id}-{row.role}-{row.index}" if row.role is not None else ""
    return {
        "uid": f"{job.id}-{row.id}",
        "frameworkName": job.id,
        "podUid": task,
        "taskroleName": row.role or "",
        "taskName": task,
        "taskIndex": row.index if row.index is not None else -1,
        "type": "Warning" if row.kind in WARNINGS else "Normal",
        "reason": row.kind,
        "message": row.message,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "sourceComponent": "shoal",
        "sourceHost": None,
    }


@router.get(
    "/jobs/{framework}/job-attempts/healthz",
    response_class=Response,  # 200 with an empty body, as OpenPAI answers: no content type
    responses={200: {"description": "The job history is served", "content": {}}},
)
def job_attempts_healthz(framework: str, caller: Caller) -> Response:
    """OpenPAI's job-history service is up (shoal's history is its store: always)."""
    return Response(status_code=200)


@router.get("/jobs/{framework}/job-attempts", response_model=None)
def job_attempts(framework: str, ctx: Context, caller: Caller) -> list[dict[str, Any]]:
    """Every attempt of the job, the latest first (deprecated in OpenPAI; its clients use it).
    A job not placed yet has one, attempt 0, waiting: OpenPAI lists the framework it created at
    submission, as ``/attempts/0`` shows it."""
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        shown = range(job.attempt, 0, -1) if job.attempt else [0]
        return [_job_attempt(session, job, attempt) for attempt in shown]


@router.get("/jobs/{framework}/job-attempts/{attempt}", response_model=None)
def job_attempt(framework: str, attempt: DbInt, ctx: Context, caller: Caller) -> dict[str, Any]:
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        if not 0 <= attempt < max(job.attempt, 1):  # attempt 0 of a job not placed yet too
            raise ApiError(404, "NoJobError", f"job {framework} has no attempt {attempt}")
        return _job_attempt(session, job, min(attempt + 1, job.attempt))


def _job_attempt(session: Session, job: Job, attempt: int) -> dict[str, Any]:
    """OpenPAI's ``JobAttempt`` for shoal's ``attempt`` of ``job`` (0: not placed yet, whose
    ``uid`` is the one its first attempt will have)."""
    detail = views.detail(session, job, attempt, ())
    status = detail["jobStatus"]
    latest = attempt == job.attempt
    roles = {
        name: {
            "taskRoleStatus": role["taskRoleStatus"],
            "taskStatuses": [
                {k: task[k] for k in ATTEMPT_TASK_FIELDS} for task in role["taskStatuses"]
            ],
        }
        for name, role in detail["taskRoles"].items()
    }
    diagnostics = status["appExitDiagnostics"] or ""
    return {
        "jobName": job.name,
        "frameworkName": job.id,
        "uid": status["appId"] or f"{job.id}-1",
        "userName": job.user,
        "state": status["attemptState"],
        "originState": status["subState"],
        "attemptIndex": max(attempt - 1, 0),
        "jobStartedTime": views.ms(job.submitted_at),
        "attemptStartedTime": status["appCreatedTime"],
        "attemptCompletedTime": status["appCompletedTime"],
        "exitCode": job.exit_code if latest else None,
        "exitPhrase": (status.get("appExitSpec") or {}).get("phrase"),
        "exitType": status["appExitType"],
        "appExitSpec": status.get("appExitSpec"),
        "exitDiagnostics": {"diagnosticsSummary": diagnostics, "runtime": None, "launcher": ""},
        "appExitDiagnostics": diagnostics or None,
        "totalGpuNumber": status["totalGpuNumber"],
        "totalTaskNumber": status["totalTaskNumber"],
        "totalTaskRoleNumber": status["totalTaskRoleNumber"],
        "taskRoles": roles,
        "isLatest": latest,
    }


ATTEMPT_TASK_FIELDS = (
    "taskIndex",
    "taskState",
    "containerId",
    "containerIp",
    "containerGpus",
    "containerLog",
    "containerExitCode",
)
