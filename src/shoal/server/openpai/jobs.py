"""OpenPAI v2 jobs (docs/openpai-compat.md): submit protocol YAML, list and get jobs, stop via
``executionType``, config, log locations. Times are epoch milliseconds, as OpenPAI's were."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.limits import SQL_INT_MAX
from shoal.server.openpai import views
from shoal.server.openpai.errors import answering
from shoal.server.openpai.listing import listing_query, ordered
from shoal.server.openpai.lookup import find_job
from shoal.server.openpai.pending_starts import pending_starts
from shoal.server.openpai.tags import tags_of
from shoal.server.schemas import SubmitRequest
from shoal.server.services import jobs as job_service
from shoal.server.services import restarts, submission

router = APIRouter(prefix="/api/v2", tags=["openpai"])


@router.post("/jobs", status_code=202)
async def submit(request: Request, ctx: Context, caller: Caller) -> dict[str, str]:
    """Submit an OpenPAI protocol YAML job (``Content-Type: text/yaml``). As in OpenPAI, a
    user's job name is taken for good: a name any earlier job had is refused (409)."""
    with answering(400, 403, 409):
        body = await request.body()  # over max_body_bytes: 413 before it is read (limits.py)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "InvalidParametersError", "the job is not UTF-8 text") from None
        request_ = SubmitRequest(spec=text, format="pai")
        done = await submission.submit_grouped(ctx, caller, request_, names_for_good=True)
    return {"message": f"update job {done.names[0]} successfully"}


@router.get("/jobs", response_model=None)
def list_jobs(
    ctx: Context,
    caller: Caller,
    username: str | None = None,
    vc: str | None = None,
    state: str | None = None,
    keyword: str | None = None,
    tagsContain: str | None = None,
    tagsNotContain: str | None = None,
    order: str | None = None,
    offset: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,  # SQLite integers are 64-bit
    limit: Annotated[int, Query(ge=1, le=50000)] = 5000,
    withTotalCount: bool = False,
) -> Any:
    """Jobs (arrays' elements left out), filtered and ordered as OpenPAI's list is."""
    listing = listing_query(
        caller, username, vc, state, keyword, _split(tagsContain), _split(tagsNotContain)
    )
    with ctx.db.read() as session:
        rows = ordered(list(session.scalars(listing)), order)
        page = rows[offset : offset + limit]
        tags = tags_of(session, [job.id for job in page])
    data = [views.summary(job, tags.get(job.id, ())) for job in page]
    return {"totalCount": len(rows), "data": data} if withTotalCount else data


def _split(value: str | None) -> list[str]:
    return [part for part in (value or "").split(",") if part]


@router.get("/jobs/{framework}", response_model=None)
def get_job(framework: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    """The job with its last attempt."""
    with ctx.db.read() as session:
        job = find_job(session, caller, framework)
        return views.detail(session, job, job.attempt, tags_of(session, [job.id]).get(job.id, []))


@router.get("/jobs/{framework}/attempts/{attempt}", response_model=None)
def get_job_attempt(framework: str, attempt: int, ctx: Context, caller: Caller) -> dict[str, Any]:
    """The job with one attempt (OpenPAI's attempt ids start at 0)."""
    with ctx.db.read() as session:
        job = find_job(session, caller, framework)
        if not 0 <= attempt < max(job.attempt, 1):
            raise ApiError(404, "NoJobError", f"job {framework} has no attempt {attempt}")
        tags = tags_of(session, [job.id]).get(job.id, [])
        return views.detail(session, job, min(attempt + 1, job.attempt), tags)


class ExecutionType(BaseModel):
    value: Literal["START", "STOP"]


@router.put("/jobs/{framework}/executionType", status_code=202)
def set_execution_type(
    framework: str, body: ExecutionType, request: Request, ctx: Context, caller: Caller
) -> dict[str, str]:
    """``START`` runs an ended job again as its next attempt, and a stopping one once it has
    stopped (``pending_starts.py``); ``STOP`` stops the job (and cancels such a START)."""
    with answering(400, 404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
    starts = pending_starts(request.app)
    with answering(400, 404):
        if body.value == "START":
            if not starts.ask(caller, job.id):
                restarts.restart(ctx, caller, job.id)
        else:
            starts.cancel(caller, job.id)
            job_service.stop(ctx, caller, job.id)
    return {"message": f"execute job {job.name} successfully"}


@router.get("/jobs/{framework}/config", response_class=Response)
def get_config(framework: str, ctx: Context, caller: Caller) -> Response:
    """The submitted job file, with every secret value masked."""
    with ctx.db.read() as session:
        job = find_job(session, caller, framework)
    try:
        document = yaml.safe_load(job.source_text)
    except yaml.YAMLError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("secrets"), dict):
        document["secrets"] = dict.fromkeys(document["secrets"], "******")
    text = yaml.safe_dump(document, sort_keys=False) if document is not None else ""
    return Response(text, media_type="text/yaml")
