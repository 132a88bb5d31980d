"""Container jobs that wait for an image (reason ``ImageNotFound``).

A container job that names an image nobody has pushed is accepted (unless submitted with
``--strict-images``) and waits: ``jobs.missing_image`` holds the first missing image's name and
keeps the job out of the scheduler's queue (``services/snapshot._WAITING``), with the reason and
the command that fixes it as its pending reason. The scheduler, which is pure, never sees such a
job, so it never reasons about images.

- Pushing the image releases the jobs held for it (``release``): each goes to the queue, or waits
  for its next missing image, with its version raised so the scheduler's model reloads it.
- Removing an image holds the queued jobs that need it again (``hold_users``); jobs already
  placed keep running.

``job_images`` records the images each container job needs (an array's parent for its elements),
so both are a query on an index, whatever the length of the queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import (
    ColumnElement,
    SQLColumnExpression,
    String,
    case,
    cast,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.image_archives import normalise_name
from shoal.server.services.events import record
from shoal.spec.model import JobSpec, Runtime
from shoal.store.models import ImageRow, Job, JobImage

HOLD_CODE = "ImageNotFound"
HOLD_TEMPLATE = (
    "image {name} is not in the cluster: push it with `shoal image push {name}` (from podman's "
    "store, or `shoal image push FILE.tar --name {name}`); the job is queued once it is there"
)


def hold_message(name: str) -> str:
    return HOLD_TEMPLATE.format(name=name)


def hold_message_of(column: SQLColumnExpression[str | None]) -> ColumnElement[str]:
    """``hold_message`` computed by the database from a column holding the image's name."""
    parts = HOLD_TEMPLATE.split("{name}")
    text: ColumnElement[str] = literal(parts[0], String)
    for part in parts[1:]:
        text = text + cast(column, String) + literal(part, String)
    return text


def hold_fields(missing: str | None) -> dict[str, str | None]:
    """The columns of a new job's row that hold it for ``missing`` (None: not held)."""
    return {
        "missing_image": missing,
        "pending_code": HOLD_CODE if missing else None,
        "pending_message": hold_message(missing) if missing else None,
    }


def images_of(spec: JobSpec) -> tuple[str, ...]:
    """The images (NAME:TAG) a job runs: a container job's roles', none for a process job. The
    names were checked at submission (``services/runtimes.py``)."""
    if spec.runtime is not Runtime.CONTAINER:
        return ()
    return tuple(sorted({normalise_name(role.image) for role in spec.roles if role.image}))


def missing_images(session: Session, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that have not been pushed, in the given order."""
    if not names:
        return []
    pushed = set(session.scalars(select(ImageRow.name).where(ImageRow.name.in_(list(names)))))
    return [name for name in names if name not in pushed]


def note_job_images(session: Session, job_ids: Iterable[str], names: Sequence[str]) -> None:
    rows = [{"job_id": job_id, "image": name} for job_id in job_ids for name in names]
    if rows:
        session.connection().execute(insert(JobImage), rows)


_WAITING_FREE = (Job.state == State.WAITING.value, Job.completing.is_(None))


def release(session: Session, name: str, now: float) -> list[str]:
    """Jobs held for ``name``, which has just been pushed: queued, or held for the next image
    they need that is still missing. Returns the ids of those queued (not array parents, nor
    elements their array's cap holds back)."""
    held_for = Job.missing_image == name
    groups = session.scalars(
        select(func.coalesce(Job.array_job_id, Job.id)).where(held_for, *_WAITING_FREE).distinct()
    ).all()
    queued: list[str] = []
    for group in groups:
        needed = sorted(session.scalars(select(JobImage.image).where(JobImage.job_id == group)))
        still = missing_images(session, [n for n in needed if n != name])
        after = still[0] if still else None
        members = or_(Job.id == group, Job.array_job_id == group)
        changed = session.execute(
            update(Job)
            .where(held_for, members, *_WAITING_FREE)
            .values(
                missing_image=after,
                version=Job.version + 1,
                pending_code=case((Job.array_held.is_(True), Job.pending_code), else_=_code(after)),
                pending_message=case(
                    (Job.array_held.is_(True), Job.pending_message), else_=_message(after)
                ),
            )
            .returning(Job.id, Job.array_held)
        ).all()
        said = f"image {name} was pushed: " + (
            "the job is queued" if after is None else f"it waits for image {after} now"
        )
        record(session, group, now, "image-pushed", said)
        if after is None:
            queued += [job_id for job_id, cap_held in changed if not cap_held]
    return sorted(queued)


def _code(after: str | None) -> ColumnElement[str | None]:
    return literal(HOLD_CODE if after else None, String)


def _message(after: str | None) -> ColumnElement[str | None]:
    return literal(hold_message(after) if after else None, String)


def hold_users(session: Session, name: str, now: float) -> list[str]:
    """Queued jobs that need ``name``, which has just been removed: held for it again (those
    held for another image already stay so). Returns their ids (array parents left out)."""
    groups = select(JobImage.job_id).where(JobImage.image == name)
    held = session.execute(
        update(Job)
        .where(
            *_WAITING_FREE,
            Job.missing_image.is_(None),
            or_(Job.id.in_(groups), Job.array_job_id.in_(groups)),
        )
        .values(
            missing_image=name,
            version=Job.version + 1,
            pending_code=case((Job.array_held.is_(True), Job.pending_code), else_=HOLD_CODE),
            pending_message=case(
                (Job.array_held.is_(True), Job.pending_message), else_=hold_message(name)
            ),
        )
        .returning(Job.id, Job.array_job_id, Job.array_size)
    ).all()
    for job_id, parent, _size in held:
        if parent is None:
            said = f"image {name} was removed: the job waits until it is pushed again"
            record(session, job_id, now, "image-removed", said)
    return sorted(job_id for job_id, _parent, size in held if size is None)


def hold_if_missing(session: Session, job: Job, spec: JobSpec, now: float) -> None:
    """A job going back to the queue (run again after it ended) waits for a missing image; one
    stopped while it waited for an image no longer does once it is there."""
    missing = missing_images(session, images_of(spec))
    job.missing_image = missing[0] if missing else None
    if missing:
        job.pending_code, job.pending_message = HOLD_CODE, hold_message(missing[0])
        record(session, job.id, now, "image-missing", hold_message(missing[0]))
