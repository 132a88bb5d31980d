"""Finding a job by OpenPAI's id, ``<user>~<job name>``: the user's latest job of that name (a
name is kept for good under ``/api/v2``; a job submitted through ``/api/v1`` may share it with an
earlier one). Others' jobs are found by admins only: for anyone else they do not exist."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError
from shoal.store.models import Job


def find_job(session: Session, caller: Principal, framework: str) -> Job:
    user, sep, name = framework.partition("~")
    if not sep:
        raise ApiError(404, "NoJobError", f"job {framework} is not found: ids are <user>~<name>")
    job = session.scalar(
        select(Job)
        .where(Job.user == user, Job.name == name, Job.array_index.is_(None))
        .order_by(Job.seq.desc())
    )
    if job is None or not (caller.is_admin or job.user == caller.user):
        raise ApiError(404, "NoJobError", f"job {framework} is not found")
    return job
