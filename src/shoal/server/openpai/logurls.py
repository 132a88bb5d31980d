"""Log locations OpenPAI's clients can read as they are: absolute URLs that carry their own
credential, as OpenPAI's log manager's do (its web portal and SDK callers fetch them with no
``Authorization`` header).

A location is ``/log-manager/{job id}/{job attempt}/{role}/{index}/{task attempt}/{stream}`` with
``expires`` and ``token`` in the query: ``token`` is an HMAC-SHA256, under a key kept in the
server's home (``log-url.key``, mode 0600), of exactly that stream and expiry. It is handed out
only to a caller allowed to read the job, lets its holder read that one stream and nothing else,
and stops working after ``VALID_S``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from sqlalchemy import select

from shoal.server.context import ApiError, ServerContext
from shoal.server.deps import Context
from shoal.server.services.logs import log_path
from shoal.store.models import Task

router = APIRouter(tags=["openpai"])
VALID_S = 3600
KEY_FILE = "log-url.key"
STREAMS = ("stdout", "stderr")


def _key(home: Path) -> bytes:
    path = home / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as handle:  # the first caller writes it; the others read it
        key = secrets.token_bytes(32)
        handle.write(key)
    return key


def _digest(home: Path, parts: tuple[object, ...], expires: int) -> str:
    message = "\n".join(map(str, (*parts, expires))).encode()
    return hmac.new(_key(home), message, hashlib.sha256).hexdigest()


def locations(
    ctx: ServerContext, base_url: str, task: Task, task_attempt: int
) -> list[dict[str, str]]:
    """Signed URLs of the task attempt's stdout and stderr (``task_attempt`` counts from 1)."""
    expires = int(ctx.clock()) + VALID_S
    found = []
    for stream in STREAMS:
        parts = (task.job_id, task.job_attempt, task.role, task.index, task_attempt, stream)
        path = "/".join(map(str, parts))
        token = _digest(ctx.settings.home, parts, expires)
        uri = f"{base_url.rstrip('/')}/log-manager/{path}?expires={expires}&token={token}"
        found.append({"name": stream, "uri": uri})
    return found


@router.get("/log-manager/{job_id}/{job_attempt}/{role}/{index}/{task_attempt}/{stream}")
def read_log(
    job_id: str,
    job_attempt: int,
    role: str,
    index: int,
    task_attempt: int,
    stream: str,
    expires: int,
    token: str,
    request: Request,
    ctx: Context,
) -> Response:
    """One stream of one task attempt, for the holder of a URL ``locations`` signed."""
    parts = (job_id, job_attempt, role, index, task_attempt, stream)
    wanted = _digest(ctx.settings.home, parts, expires)
    # bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500)
    if not hmac.compare_digest(wanted.encode(), token.encode()) or stream not in STREAMS:
        raise ApiError(403, "ForbiddenKeyError", "this log URL is not valid; ask for it again")
    if ctx.clock() > expires:
        raise ApiError(403, "ForbiddenKeyError", "this log URL has expired; ask for it again")
    with ctx.db.read() as session:
        task = session.scalar(
            select(Task).where(
                Task.job_id == job_id,
                Task.job_attempt == job_attempt,
                Task.role == role,
                Task.index == index,
            )
        )
    if task is None:
        raise ApiError(404, "NoJobError", f"job {job_id} has no task {role}[{index}]")
    path = log_path(ctx, task, task_attempt, stream)
    if not path.exists():
        return PlainTextResponse("")  # nothing written yet
    return FileResponse(path, media_type="text/plain; charset=utf-8")
