"""Pushed container images: ``shoal image push|list|rm`` and what agents load (docs/containers.md,
"Images").

An image is pushed as an archive (``podman save``: docker-archive or oci-archive), streamed into
the blob store and kept there under its sha256 (``blobs.receive``: nothing half-written). It
becomes visible in one commit, under its NAME:TAG, once the archive has been read and found to
be an image (its ID is the sha256 of its config). Pushing a name again moves it to the new image;
jobs resolve names when their tasks are launched (``image_ref_for``).

Names are the cluster's: every signed-in user sees them all and may push a new one; a name is
replaced or removed only by the user who pushed it or an admin, so no user can swap the image
someone else's jobs run.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from shoal.image_archives import ImageNameError, NotAnImage, normalise_name, read_archive
from shoal.protocol import ImageRef
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import image_holds
from shoal.server.services.blobs import Received
from shoal.server.services.datasets import blob_store, forget_blob
from shoal.server.services.snapshot import spec_of
from shoal.spec.model import JobSpec, Runtime
from shoal.store.models import ImageRow, Job


@dataclass(frozen=True)
class Pushed:
    row: ImageRow
    replaced: str | None  # the image ID the name had before (None: a new name)
    released: list[str]  # jobs that waited for it and are queued now


def image_name(text: str) -> str:
    """NAME:TAG of ``text``, or a 400 saying what an image name looks like."""
    try:
        return normalise_name(text)
    except ImageNameError as exc:
        raise ApiError(400, "InvalidImageName", str(exc)) from None


def _may_change(principal: Principal, row: ImageRow) -> None:
    if principal.is_admin or row.pushed_by == principal.user:
        return
    raise ApiError(
        403,
        "ForbiddenUserError",
        f"image {row.name} was pushed by {row.pushed_by}; only {row.pushed_by} or an admin may "
        "replace or remove it: push yours under another name (--name NAME:TAG)",
    )


def check_push(ctx: ServerContext, principal: Principal, text: str) -> str:
    """Before the body is read: a valid name the caller may push to. Returns NAME:TAG."""
    name = image_name(text)
    with ctx.db.read() as session:
        row = session.get(ImageRow, name)
        if row is not None:
            _may_change(principal, row)
    return name


def publish(ctx: ServerContext, principal: Principal, name: str, received: Received) -> Pushed:
    """Make a complete upload the image ``name`` (one commit) and queue the jobs waiting for
    it. An upload that is not an image archive is a 400 naming what is missing; nothing of it
    is kept (the caller removes the temporary file)."""
    try:
        archive = read_archive(received.path)
    except NotAnImage as exc:
        raise ApiError(
            400, "NotAnImageArchive", f"the upload for image {name} is refused: {exc}"
        ) from None
    blob_store(ctx).commit(received)
    now = ctx.clock()
    try:
        with ctx.db.write() as session:
            row = session.get(ImageRow, name)
            replaced = old_blob = None
            if row is None:
                row = ImageRow(name=name)
                session.add(row)
            else:
                _may_change(principal, row)  # again: another user may have pushed it meanwhile
                replaced, old_blob = row.image_id, row.blob_sha256
            row.image_id, row.blob_sha256 = archive.image_id, received.sha256
            row.size, row.pushed_by, row.pushed_at = received.size, principal.user, now
            session.flush()
            released = image_holds.release(session, name, now)
            session.expunge(row)
    except BaseException:
        forget_blob(ctx, received.sha256)  # nothing committed names it (unless it was there)
        raise
    if old_blob is not None and old_blob != received.sha256:
        forget_blob(ctx, old_blob)
    ctx.wake_scheduler()
    return Pushed(row, replaced, released)


def listing(ctx: ServerContext) -> list[ImageRow]:
    with ctx.db.read() as session:
        rows = list(session.scalars(select(ImageRow).order_by(ImageRow.name)))
        for row in rows:
            session.expunge(row)
    return rows


def remove(ctx: ServerContext, principal: Principal, text: str) -> list[str]:
    """Remove the image (its pusher or an admin); returns the queued jobs that need it, which
    now wait until it is pushed again. Jobs already placed keep running."""
    name = image_name(text)
    with ctx.db.write() as session:
        row = session.get(ImageRow, name)
        if row is None:
            raise ApiError(
                404, "NoImageError", f"no image {name} in the cluster; see `shoal image list`"
            )
        _may_change(principal, row)
        blob = row.blob_sha256
        session.delete(row)
        session.flush()
        held = image_holds.hold_users(session, name, ctx.clock())
    forget_blob(ctx, blob)
    return held


def image_for_role(session: Session, spec: JobSpec, role: str) -> ImageRef | None:
    """The image a container job's ``role`` runs, as pushed now (None: a process job, or the
    image is not in the cluster)."""
    if spec.runtime is not Runtime.CONTAINER:
        return None
    image = spec.role(role).image
    if image is None:
        return None
    try:
        name = normalise_name(image)
    except ImageNameError:
        return None  # a job stored before names were checked
    row = session.get(ImageRow, name)
    if row is None:
        return None
    return ImageRef(name=name, image_id=row.image_id, blob_sha256=row.blob_sha256, size=row.size)


def image_ref_for(job: Job, role: str) -> ImageRef | None:
    """The image of ``job``'s ``role`` for its launch order: only container jobs have one. It
    reads the session ``job`` was loaded in (the order's read)."""
    spec = spec_of(job)
    if spec.runtime is not Runtime.CONTAINER:
        return None
    session = object_session(job)
    assert session is not None, "a launch order is built inside a read"
    return image_for_role(session, spec, role)
