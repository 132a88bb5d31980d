"""``/api/v1/code`` (job code archives by sha256) and ``/api/v1/data`` (data sets).

Uploads are streamed request bodies (``PUT``, ``application/octet-stream``), never JSON: the
server writes them to a temporary file as they arrive and makes them visible by one rename and
one commit after their sha256 is verified. Downloads are streamed files."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from shoal import archives
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.deps import Caller, Context
from shoal.server.schemas import CodeArchiveOut, DataSetOut, ShareIn
from shoal.server.services import datasets
from shoal.server.services.blobs import SHA256_PATTERN, Received, receive
from shoal.store.models import DataSetRow

router = APIRouter(tags=["code and data"])
Sha256 = Annotated[str, Query(pattern=SHA256_PATTERN, description="The body's sha256 (hex).")]


def _code_archive(ctx: ServerContext, sha256: str) -> CodeArchiveOut:
    store = datasets.blob_store(ctx)
    if not store.is_code(sha256):
        raise ApiError(404, "NoCodeArchive", f"the server has no code archive {sha256}")
    return CodeArchiveOut(sha256=sha256, size=store.path(sha256).stat().st_size)


@router.get("/api/v1/code/{sha256}", response_model=CodeArchiveOut)
def code_archive(sha256: str, ctx: Context, caller: Caller) -> CodeArchiveOut:
    """Whether the server has this code archive (404 if not): the CLI uploads only if not."""
    return _code_archive(ctx, sha256)


@router.put("/api/v1/code/{sha256}", response_model=CodeArchiveOut, status_code=201)
async def upload_code(
    sha256: str, request: Request, ctx: Context, caller: Caller
) -> CodeArchiveOut:
    """Upload a code archive (.tar.gz, streamed body) under its sha256. An archive with an unsafe
    member (absolute path, '..', a link out of it, a device or FIFO) is refused, naming it.
    Over ``max_upload_bytes``: 413 before the body is read (limits.py)."""
    limit = ctx.settings.max_upload_bytes or None
    received = await receive(datasets.blob_store(ctx), request.stream(), sha256, limit)
    try:
        await run_in_threadpool(_check_and_keep_code, ctx, received)
    finally:
        received.path.unlink(missing_ok=True)
    return _code_archive(ctx, sha256)


def _check_and_keep_code(ctx: ServerContext, received: Received) -> None:
    try:
        archives.check(received.path, max_unpacked=ctx.settings.max_upload_bytes * 20 or None)
    except archives.ArchiveError as exc:
        raise ApiError(400, "UnsafeArchive", f"the code archive is refused: {exc}") from None
    store = datasets.blob_store(ctx)
    store.commit(received)
    store.mark_code(received.sha256)


def _out(row: DataSetRow, caller: Principal) -> DataSetOut:
    mine = caller.is_admin or row.owner == caller.user
    return DataSetOut(
        owner=row.owner,
        name=row.name,
        ref=f"{row.owner}/{row.name}",
        kind=row.kind,
        sha256=row.sha256,
        size=row.size,
        createdAt=row.created_at,
        shares=(row.shares or {}) if mine else None,
    )


@router.get("/api/v1/data", response_model=list[DataSetOut])
def list_data(
    ctx: Context,
    caller: Caller,
    all_users: Annotated[bool, Query(alias="all", description="Admins: everyone's.")] = False,
) -> list[DataSetOut]:
    """The caller's data sets and those shared with it."""
    return [_out(row, caller) for row in datasets.visible(ctx, caller, all_users)]


@router.put("/api/v1/data/{owner}/{name}", response_model=DataSetOut, status_code=201)
async def push_data(
    owner: str,
    name: str,
    request: Request,
    ctx: Context,
    caller: Caller,
    sha256: Sha256,
    kind: Literal["file", "dir"] = "file",
    replace: bool = False,
) -> DataSetOut:
    """Upload a data set (a file, or a directory as a tar) as a streamed body. It appears only
    once complete and matching ``sha256``; a cut-short upload leaves nothing."""
    await run_in_threadpool(datasets.check_push, ctx, caller, owner, name, replace)
    limit = ctx.settings.max_push_bytes or None  # over it: 413 (limits.py)
    received = await receive(datasets.blob_store(ctx), request.stream(), sha256, limit)
    try:
        row = await run_in_threadpool(datasets.publish, ctx, caller, name, kind, received, replace)
    finally:
        received.path.unlink(missing_ok=True)
    return _out(row, caller)


@router.get("/api/v1/data/{owner}/{name}", response_model=DataSetOut)
def get_data(owner: str, name: str, ctx: Context, caller: Caller) -> DataSetOut:
    return _out(datasets.find(ctx, caller, owner, name), caller)


@router.get("/api/v1/data/{owner}/{name}/content", response_class=FileResponse)
def pull_data(owner: str, name: str, ctx: Context, caller: Caller) -> FileResponse:
    """The data set's bytes, streamed (a directory: a tar); ``X-Shoal-Sha256`` to verify."""
    row = datasets.find(ctx, caller, owner, name)
    path = datasets.blob_store(ctx).path(row.sha256)
    if not path.is_file():
        raise ApiError(404, "NoDataSetError", f"data set {owner}/{name} has lost its content")
    headers = {"X-Shoal-Sha256": row.sha256, "X-Shoal-Data-Kind": row.kind}
    return FileResponse(path, media_type="application/octet-stream", headers=headers)


@router.delete("/api/v1/data/{owner}/{name}", status_code=204)
def remove_data(owner: str, name: str, ctx: Context, caller: Caller) -> None:
    """Remove a data set (its owner or an admin). Jobs already submitted keep their copy."""
    datasets.remove(ctx, caller, owner, name)


@router.post("/api/v1/data/{owner}/{name}/share", response_model=DataSetOut)
def share_data(owner: str, name: str, body: ShareIn, ctx: Context, caller: Caller) -> DataSetOut:
    """Let these users, groups' members and VCs' members read it (its owner or an admin)."""
    change = body.model_dump()
    return _out(datasets.change_shares(ctx, caller, owner, name, change, add=True), caller)


@router.post("/api/v1/data/{owner}/{name}/unshare", response_model=DataSetOut)
def unshare_data(owner: str, name: str, body: ShareIn, ctx: Context, caller: Caller) -> DataSetOut:
    change = body.model_dump()
    return _out(datasets.change_shares(ctx, caller, owner, name, change, add=False), caller)
