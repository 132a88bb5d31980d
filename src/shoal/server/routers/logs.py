"""``/api/v1/jobs/{job}/logs/lines``: every task's log lines with their times (merged views,
tails, ``since``, earlier attempts). ``/api/v1/jobs/{job}/logs`` (raw chunks) stays in jobs."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, Response
from sqlalchemy import select

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.limits import SQL_INT_MAX
from shoal.server.schemas import LogLines
from shoal.server.services import jobs as job_service
from shoal.server.services.arrays import no_logs_of_a_parent
from shoal.server.services.log_lines import LinesQuery, read_lines
from shoal.server.services.logs import log_path
from shoal.store.models import Task

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.get("/{job}/logs/lines", response_model=LogLines)
def get_log_lines(
    job: str,
    ctx: Context,
    caller: Caller,
    attempt: Annotated[
        str | None, Query(description="Job attempt N, or N.M for task try M.")
    ] = None,
    previous: Annotated[bool, Query(description="The job attempt before the current.")] = False,
    role: str | None = None,
    index: Annotated[int | None, Query(ge=0, le=SQL_INT_MAX)] = None,
    stream: Literal["stdout", "stderr"] | None = None,
    tail: Annotated[int | None, Query(ge=0, le=100000, description="Last N lines.")] = None,
    since: Annotated[
        str | None, Query(description="Lines shipped after: 10m, 1h, 2s, 1d or RFC 3339.")
    ] = None,
    cursor: Annotated[
        list[str] | None, Query(description="ROLE/INDEX/STREAM/TRY:OFFSET, to continue a stream.")
    ] = None,
    limit: Annotated[int, Query(ge=4096, le=1024 * 1024, description="Bytes per stream.")] = (
        256 * 1024
    ),
) -> LogLines:
    """The lines of the chosen tasks and streams of one job attempt (default: the current, all
    tasks, stdout and stderr), each with the time it was shipped. Continue each stream with its
    cursor while ``more``; follow by polling with cursors until every stream is ``complete``."""
    query = LinesQuery(
        attempt=attempt,
        previous=previous,
        role=role,
        index=index,
        stream=stream,
        tail=tail,
        since=since,
        cursors=tuple(cursor or ()),
        limit=limit,
    )
    return read_lines(ctx, caller, job, query)


@router.get(
    "/{job}/logs/download",
    response_class=FileResponse,
    responses={200: {"content": {"text/plain": {}}}},
)
def download_log(
    job: str,
    ctx: Context,
    caller: Caller,
    role: str,
    index: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,
    stream: Literal["stdout", "stderr"] = "stdout",
    attempt: Annotated[
        int | None, Query(ge=1, le=SQL_INT_MAX, description="Task try (default: the last).")
    ] = None,
) -> Response:
    """One task's whole log of the job's current attempt, as a file (also once the job ended)."""
    with ctx.db.read() as session:
        found = job_service.find_job(session, caller, job)
        no_logs_of_a_parent(found)
        task = session.scalars(
            select(Task).where(
                Task.job_id == found.id,
                Task.job_attempt == found.attempt,
                Task.role == role,
                Task.index == index,
            )
        ).first()
        if task is None:
            raise ApiError(404, "NoTaskError", f"job {found.id} has no task {role}/{index} (yet)")
        which = attempt or task.attempt
        if not 1 <= which <= task.attempt:
            raise ApiError(404, "NoTaskLogError", f"task {role}/{index} has no try {which}")
        path = log_path(ctx, task, which, stream)
    name = f"{found.name}-{role}-{index}-try{which}.{stream}.log"
    if not path.exists():  # nothing written yet: an empty file, not an error
        return Response(
            b"",
            media_type="text/plain",
            headers={"Content-Disposition": attachment(name)},
        )
    return FileResponse(path, media_type="text/plain; charset=utf-8", filename=name)


def attachment(name: str) -> str:
    """A Content-Disposition naming ``name`` as FileResponse writes it: anything but plain
    characters (quotes, CR/LF, non-ASCII) percent-encoded, so no name can end the header."""
    encoded = quote(name)
    if encoded != name:
        return f"attachment; filename*=utf-8''{encoded}"
    return f'attachment; filename="{name}"'
