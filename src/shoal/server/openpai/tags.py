"""OpenPAI's job tags: ``PUT`` / ``DELETE /api/v2/jobs/{user}~{job}/tag`` with ``{"value": tag}``.
The job's owner or an admin may tag it; tags show in the job's summary and detail and filter the
list (``tagsContain`` / ``tagsNotContain``)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.openpai.errors import answering
from shoal.server.openpai.lookup import find_job
from shoal.store.models import JobTag

router = APIRouter(prefix="/api/v2", tags=["openpai"])


class TagBody(BaseModel):
    value: str = Field(min_length=1, max_length=256)


def tags_of(session: Session, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each job's tags, sorted."""
    if not job_ids:
        return {}
    found: dict[str, list[str]] = {}
    rows = session.execute(
        select(JobTag.job_id, JobTag.tag)
        .where(JobTag.job_id.in_(list(job_ids)))
        .order_by(JobTag.job_id, JobTag.tag)
    )
    for job_id, tag in rows:
        found.setdefault(job_id, []).append(tag)
    return found


@router.put("/jobs/{framework}/tag")
def add_tag(framework: str, body: TagBody, ctx: Context, caller: Caller) -> dict[str, str]:
    with answering(400, 404), ctx.db.write() as session:
        job = find_job(session, caller, framework)
        if body.value not in tags_of(session, [job.id]).get(job.id, []):
            session.execute(insert(JobTag).values(job_id=job.id, tag=body.value))
    return {"message": f"Add tag {body.value} for job {job.name} successfully."}


@router.delete("/jobs/{framework}/tag")
def delete_tag(framework: str, body: TagBody, ctx: Context, caller: Caller) -> dict[str, str]:
    with answering(400, 404), ctx.db.write() as session:
        job = find_job(session, caller, framework)
        if body.value not in tags_of(session, [job.id]).get(job.id, []):
            raise ApiError(404, "NoTagError", f"job {framework} has no tag {body.value!r}")
        session.execute(delete(JobTag).where(JobTag.job_id == job.id, JobTag.tag == body.value))
    return {"message": f"Delete tag {body.value} from job {job.name} successfully."}
