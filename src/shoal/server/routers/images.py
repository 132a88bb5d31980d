"""``/api/v1/images``: container images pushed to the cluster (docs/containers.md, "Images").

A push is a streamed request body (``PUT``, ``application/octet-stream``): an image archive as
``podman save`` writes it. It is written to a temporary file as it arrives, read for the image it
holds, and made visible under its name by one rename and one commit. ``{name:path}``: names have
slashes (``localhost/team/trainer:v3``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from shoal.server.deps import Caller, Context
from shoal.server.schemas import ImageOut, ImagePushed, ImageRemoved
from shoal.server.services import images
from shoal.server.services.blobs import SHA256_PATTERN, receive
from shoal.server.services.datasets import blob_store
from shoal.store.models import ImageRow

router = APIRouter(prefix="/api/v1/images", tags=["images"])
Sha256 = Annotated[
    str | None,
    Query(pattern=SHA256_PATTERN, description="The archive's sha256 (hex), checked if given."),
]


def _out(row: ImageRow) -> ImageOut:
    return ImageOut(
        name=row.name,
        imageId=row.image_id,
        blobSha256=row.blob_sha256,
        size=row.size,
        pushedBy=row.pushed_by,
        pushedAt=row.pushed_at,
    )


@router.get("", response_model=list[ImageOut])
def list_images(ctx: Context, caller: Caller) -> list[ImageOut]:
    """Every image pushed to the cluster, by name."""
    return [_out(row) for row in images.listing(ctx)]


@router.put("/{name:path}", response_model=ImagePushed, status_code=201)
async def push_image(
    name: str, request: Request, ctx: Context, caller: Caller, sha256: Sha256 = None
) -> ImagePushed:
    """Push an image archive (docker-archive or oci-archive tar) as ``name`` (NAME[:TAG]; no
    tag: ``latest``). Pushing a name again moves it to the new image (its pusher or an admin).
    Jobs waiting for the image are queued."""
    normalised = await run_in_threadpool(images.check_push, ctx, caller, name)
    limit = ctx.settings.max_push_bytes or None  # over it: 413 (limits.py)
    received = await receive(blob_store(ctx), request.stream(), sha256, limit)
    try:
        pushed = await run_in_threadpool(images.publish, ctx, caller, normalised, received)
    finally:
        received.path.unlink(missing_ok=True)
    out = _out(pushed.row)
    return ImagePushed(**out.model_dump(), replaced=pushed.replaced, releasedJobs=pushed.released)


@router.delete("/{name:path}", response_model=ImageRemoved)
def remove_image(name: str, ctx: Context, caller: Caller) -> ImageRemoved:
    """Remove an image (its pusher or an admin). Queued jobs that need it wait for it again
    (``ImageNotFound``); jobs already placed keep running."""
    held = images.remove(ctx, caller, name)
    return ImageRemoved(name=images.image_name(name), heldJobs=held)
