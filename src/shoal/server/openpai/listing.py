"""OpenPAI's job list: its filters (``username``, ``vc``, ``state``, ``keyword``, ``tagsContain``,
``tagsNotContain``, each a comma list where it names things) and its ``order``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Select, exists, or_, select

from shoal.server.auth import Principal
from shoal.server.context import ApiError
from shoal.server.openpai.views import total_gpus, total_tasks
from shoal.store.models import Job, JobTag

DEFAULT_ORDER = "submissionTime,DESC"


def listing_query(
    caller: Principal,
    username: str | None,
    vc: str | None,
    state: str | None,
    keyword: str | None,
    tags_contain: Sequence[str],
    tags_not_contain: Sequence[str],
) -> Select[Job]:
    """The caller's jobs (everyone's, for an admin) matching every filter given."""
    query = select(Job).where(Job.array_index.is_(None))
    if not caller.is_admin:
        query = query.where(Job.user == caller.user)
    if username:
        query = query.where(Job.user.in_(username.split(",")))
    if vc:
        query = query.where(Job.virtual_cluster.in_(vc.split(",")))
    if state:
        query = query.where(Job.state.in_(state.split(",")))
    if keyword:  # in the user's name, the job's name or its VC's, as OpenPAI searches
        pattern = f"%{_escaped(keyword)}%"
        query = query.where(
            or_(
                Job.user.like(pattern, escape="\\"),
                Job.name.like(pattern, escape="\\"),
                Job.virtual_cluster.like(pattern, escape="\\"),
            )
        )
    tagged = select(JobTag.job_id).where(JobTag.job_id == Job.id)
    if tags_contain:
        query = query.where(exists(tagged.where(JobTag.tag.in_(tags_contain))))
    if tags_not_contain:
        query = query.where(~exists(tagged.where(JobTag.tag.in_(tags_not_contain))))
    return query.order_by(Job.seq.desc())


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_FIELDS: dict[str, Callable[[Job], Any]] = {
    "jobName": lambda j: j.name,
    "submissionTime": lambda j: j.seq,  # submission order, without ties
    "username": lambda j: j.user,
    "vc": lambda j: j.virtual_cluster,
    "retries": lambda j: j.retries_user + j.retries_platform + j.retries_resource,
    "totalTaskNumber": total_tasks,
    "totalGpuNumber": total_gpus,
    "state": lambda j: j.state,
    "completionTime": lambda j: j.completed_at,
}


def ordered(jobs: list[Job], order: str | None) -> list[Job]:
    """``jobs`` in ``order`` (``<field>,<ASC|DESC>``). Jobs with no completion time come last
    in ascending order and first in descending order, as OpenPAI documents."""
    field, _, direction = (order or DEFAULT_ORDER).partition(",")
    direction = direction.upper() or "DESC"
    key = _FIELDS.get(field)
    if key is None or direction not in ("ASC", "DESC"):
        raise ApiError(
            400,
            "InvalidParametersError",
            f"order: {order!r} is not <field>,<ASC|DESC> with a field of {', '.join(_FIELDS)}",
        )
    descending = direction == "DESC"
    present = [job for job in jobs if key(job) is not None]
    missing = [job for job in jobs if key(job) is None]
    present.sort(key=lambda job: (key(job), job.seq), reverse=descending)
    return missing + present if descending else present + missing
