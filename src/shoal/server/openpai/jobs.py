"""OpenPAI v2 jobs (docs/openpai-compat.md): submit protocol YAML, list and get jobs, stop via
``executionType``, config, log locations. Times are epoch milliseconds, as OpenPAI's were."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.schemas import SubmitRequest
from shoal.server.services import jobs as job_service
from shoal.server.services import submission
from shoal.server.services.views import current_tasks
from shoal.store.models import Job, Task

router = APIRouter(prefix="/api/v2", tags=["openpai"])
MAX_BODY = 1024 * 1024


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value * 1000)


def _summary(job: Job) -> dict[str, Any]:
    roles = job.spec.get("roles", [])
    return {
        "name": job.name,
        "username": job.user,
        "state": job.state,
        "subState": job.state,
        "executionType": "STOP" if job.stop_requested else "START",
        "retries": job.retries_user + job.retries_platform + job.retries_resource,
        "retryDetails": {
            "user": job.retries_user,
            "platform": job.retries_platform,
            "resource": job.retries_resource,
        },
        "submissionTime": _ms(job.submitted_at),
        "createdTime": _ms(job.submitted_at),
        "launchedTime": _ms(job.launched_at),
        "completedTime": _ms(job.completed_at),
        "appExitCode": job.exit_code,
        "virtualCluster": job.virtual_cluster,
        "totalGpuNumber": sum(r["instances"] * r["resources"]["gpu"] for r in roles),
        "totalTaskNumber": sum(r["instances"] for r in roles),
        "totalTaskRoleNumber": len(roles),
        "jobPriority": job.priority_class,
        "debugId": job.id,
    }


@router.post("/jobs", status_code=202)
async def submit(request: Request, ctx: Context, caller: Caller) -> dict[str, str]:
    """Submit an OpenPAI protocol YAML job (``Content-Type: text/yaml``)."""
    body = await request.body()
    if len(body) > MAX_BODY:
        raise ApiError(413, "InvalidProtocolError", f"the job is over {MAX_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "InvalidProtocolError", "the job is not UTF-8 text") from None
    try:
        done = await submission.submit_grouped(ctx, caller, SubmitRequest(spec=text))
    except ApiError as exc:
        if exc.code == "InvalidJobSpec":
            raise ApiError(400, "InvalidProtocolError", exc.message, exc.problems) from None
        raise
    return {
        "status": "submitted",
        "message": f"update job {done.names[0]} successfully (id {done.ids[0]})",
    }


@router.get("/jobs", response_model=None)
def list_jobs(
    ctx: Context,
    caller: Caller,
    username: str | None = None,
    vc: str | None = None,
    state: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=50000)] = 5000,
    withTotalCount: bool = False,
) -> Any:
    query = select(Job).where(Job.array_job_id.is_(None)).order_by(Job.seq.desc())
    if not caller.is_admin:
        query = query.where(Job.user == caller.user)
    if username:
        query = query.where(Job.user.in_(username.split(",")))
    if vc:
        query = query.where(Job.virtual_cluster.in_(vc.split(",")))
    if state:
        query = query.where(Job.state.in_(state.split(",")))
    with ctx.db.read() as session:
        rows = list(session.scalars(query))
    data = [_summary(job) for job in rows[offset : offset + limit]]
    return {"totalCount": len(rows), "data": data} if withTotalCount else data


def _find(session: Session, caller: Principal, framework: str) -> Job:
    user, sep, name = framework.partition("~")
    if not sep:
        raise ApiError(400, "InvalidParametersError", "job ids look like <user>~<job name>")
    job = session.scalar(
        select(Job)
        .where(Job.user == user, Job.name == name, Job.array_job_id.is_(None))
        .order_by(Job.seq.desc())
    )
    if job is None or not (caller.is_admin or job.user == caller.user):
        raise ApiError(404, "NoJobError", f"job {framework} is not found")
    return job


def _task_status(task: Task) -> dict[str, Any]:
    return {
        "taskIndex": task.index,
        "taskUid": task.attempt_id,
        "taskState": task.state,
        "containerId": task.attempt_id,
        "containerIp": task.address,
        "containerNodeName": task.node,
        "containerPorts": {label: ",".join(map(str, ports)) for label, ports in task.ports},
        "containerGpus": sum(1 << g for g in task.gpu_indices),
        "containerLog": f"/api/v1/jobs/{task.job_id}/logs?role={task.role}&index={task.index}",
        "containerExitCode": task.exit_code,
        "containerExitSpec": {"type": task.exit_class} if task.exit_class else None,
        "containerExitDiagnostics": task.diagnostics,
        "retries": task.attempt - 1,
        "accountableRetries": task.attempt - 1,
        "createdTime": _ms(task.created_at),
        "launchedTime": _ms(task.started_at),
        "completedTime": _ms(task.finished_at),
        "attemptId": task.attempt - 1,
        "attemptState": task.state,
    }


@router.get("/jobs/{framework}", response_model=None)
def get_job(framework: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    with ctx.db.read() as session:
        job = _find(session, caller, framework)
        summary = _summary(job)
        roles: dict[str, Any] = {}
        for task in current_tasks(session, job):
            role = roles.setdefault(
                task.role, {"taskRoleStatus": {"name": task.role}, "taskStatuses": []}
            )
            role["taskStatuses"].append(_task_status(task))
    status = {k: v for k, v in summary.items() if k not in ("name", "debugId", "jobPriority")}
    status.update(
        attemptId=max(job.attempt - 1, 0),
        attemptState=job.state,
        appExitDiagnostics=job.diagnostics,
        appExitType=job.exit_class,
    )
    return {
        "debugId": job.id,
        "name": job.name,
        "tags": [],
        "jobPriority": job.priority_class,
        "jobStatus": status,
        "taskRoles": roles,
    }


class ExecutionType(BaseModel):
    value: Literal["START", "STOP"]


@router.put("/jobs/{framework}/executionType", status_code=202)
def set_execution_type(
    framework: str, body: ExecutionType, ctx: Context, caller: Caller
) -> dict[str, str]:
    with ctx.db.read() as session:
        job = _find(session, caller, framework)
    if body.value == "START":
        raise ApiError(
            400, "InvalidParametersError", "restarting a job is not supported; submit it again"
        )
    job_service.stop(ctx, caller, job.id)
    return {"message": f"execute job {job.name} successfully"}


@router.get("/jobs/{framework}/config", response_class=Response)
def get_config(framework: str, ctx: Context, caller: Caller) -> Response:
    """The submitted job file, with every secret value masked."""
    with ctx.db.read() as session:
        job = _find(session, caller, framework)
    try:
        document = yaml.safe_load(job.source_text)
    except yaml.YAMLError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("secrets"), dict):
        document["secrets"] = dict.fromkeys(document["secrets"], "******")
    text = yaml.safe_dump(document, sort_keys=False) if document is not None else ""
    return Response(text, media_type="text/yaml")


@router.get(
    "/jobs/{framework}/attempts/{job_attempt}/taskRoles/{role}/taskIndex/{index}"
    "/attempts/{task_attempt}/logs",
    response_model=None,
)
def log_locations(
    framework: str,
    job_attempt: int,
    role: str,
    index: int,
    task_attempt: int,
    ctx: Context,
    caller: Caller,
) -> dict[str, Any]:
    with ctx.db.read() as session:
        job = _find(session, caller, framework)
        task = session.scalar(
            select(Task).where(
                Task.job_id == job.id,
                Task.job_attempt == job_attempt + 1,
                Task.role == role,
                Task.index == index,
            )
        )
    if task is None or task_attempt + 1 > task.attempt:
        raise ApiError(404, "NoTaskLogError", "no such task attempt")
    base = f"/api/v1/jobs/{job.id}/logs?role={role}&index={index}&attempt={task_attempt + 1}"
    return {
        "locations": [
            {"name": "stdout", "uri": f"{base}&stream=stdout"},
            {"name": "stderr", "uri": f"{base}&stream=stderr"},
        ]
    }
