"""Sharing a job's ports (docs/proxy.md, "Sharing a job's ports"): besides its owner and admins,
the users and groups in ``jobs.shares`` may open its tasks' pages through the task proxy and
forward their ports. Nothing else of the job is shared (its details, logs, exec, stop)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit, groups
from shoal.server.services.jobs import find_job
from shoal.store.models import Job, User

MAX_SHARES = 256


@dataclass(frozen=True)
class Shares:
    users: list[str]
    groups: list[str]


def shares_of(job: Job) -> Shares:
    stored = job.shares or {}
    return Shares(list(stored.get("users", [])), list(stored.get("groups", [])))


def may_reach(job: Job, principal: Principal) -> bool:
    """Whether ``principal`` may reach the job's tasks' ports."""
    if principal.is_admin or job.user == principal.user:
        return True
    shared = shares_of(job)
    return principal.user in shared.users or bool(set(principal.groups) & set(shared.groups))


def job_for_ports(session: Session, principal: Principal, ref: str) -> Job:
    """The job ``ref`` names (id, ``user~name`` or the caller's name), if the caller may reach
    its ports: 403 naming the owner and how sharing works otherwise."""
    job = session.get(Job, ref)
    user, sep, name = ref.partition("~")
    if job is None and sep:
        job = session.scalars(
            select(Job)
            .where(Job.user == user, Job.name == name, Job.array_job_id.is_(None))
            .order_by(Job.seq.desc())
            .limit(1)
        ).first()
    if job is None:
        return find_job(session, principal, ref)
    if not may_reach(job, principal):
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"job {job.id} is {job.user}'s: only its owner, admins and those it is shared with "
            f"(`shoal job share {job.id} --user {principal.user}`, by its owner) may reach its "
            f"tasks' ports (you are {principal.user})",
        )
    return job


def get(ctx: ServerContext, principal: Principal, ref: str) -> tuple[str, Shares]:
    with ctx.db.read() as session:
        job = find_job(session, principal, ref)  # the owner or an admin
        return job.id, shares_of(job)


def replace(
    ctx: ServerContext, principal: Principal, ref: str, wanted: Shares
) -> tuple[str, Shares]:
    """Set who the job's ports are shared with (the owner or an admin); unknown users or groups
    are refused, naming them."""
    users, names = sorted(set(wanted.users)), sorted(set(wanted.groups))
    if len(users) + len(names) > MAX_SHARES:
        raise ApiError(
            422, "InvalidParametersError", f"share with at most {MAX_SHARES} users and groups"
        )
    with ctx.db.write() as session:
        job = find_job(session, principal, ref)
        known = set(session.scalars(select(User.name).where(User.name.in_(users))))
        unknown = [u for u in users if u not in known]
        if unknown:
            raise _unknown("users", unknown, "`shoal user list` names them")
        missing = groups.missing(session, names)
        if missing:
            raise _unknown("groups", missing, "`shoal user list` shows users' groups")
        job.shares = {"users": users, "groups": names}
        detail = {"users": users, "groups": names}
        audit.record(session, ctx.clock(), principal, "job.share", f"job {job.id}", detail)
    ctx.shares_version += 1
    return job.id, Shares(users, names)


def _unknown(field: str, names: list[str], hint: str) -> ApiError:
    listed = ", ".join(names)
    return ApiError(
        422,
        "InvalidParametersError",
        f"{field}: no such {field[:-1]}: {listed} ({hint})",
        [{"path": field, "message": f"unknown: {listed}"}],
    )
