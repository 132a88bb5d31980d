"""Job use cases: look up and stop (submitting: ``services/submission.py``)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.notify import noted_news
from shoal.server.services import audit
from shoal.server.services.stopping import stop_array, stop_job
from shoal.server.services.submission import ACTIVE
from shoal.store.models import Job


def find_job(session: Session, principal: Principal, ref: str) -> Job:
    """A job by id, by ``user~name`` (OpenPAI style), or by name: the caller's newest job of that
    name; for an admin with none, the one user's job of that name (active jobs first). A name
    that several users' jobs share is a 409 listing the ``user~name`` choices. Another user's
    job, named by id or ``user~name``, is a 403 for non-admins that says whose it is (its summary
    is public in ``shoal job list -A``; its details, logs and events stay hidden)."""
    job = session.get(Job, ref)
    if job is None:
        user, sep, name = ref.partition("~")
        if sep:
            job = _newest(session, user, name)
        else:
            job = _newest(session, principal.user, ref)
            if job is None and principal.is_admin:
                job = _anyone_named(session, ref)
    if job is None:
        raise ApiError(404, "NoJobError", f"no job {ref!r}")
    if not (principal.is_admin or job.user == principal.user):
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"job {job.id} ({job.user}~{job.name}) belongs to {job.user}, not to you "
            f"({principal.user}): only its owner and admins can see its details, logs and events "
            "or stop it",
        )
    return job


def _newest(session: Session, user: str, name: str) -> Job | None:
    """The user's newest job named ``name`` (an array by its parent, never an element)."""
    return session.scalar(
        select(Job)
        .where(Job.user == user, Job.name == name, Job.array_job_id.is_(None))
        .order_by(Job.seq.desc())
        .limit(1)
    )


def _anyone_named(session: Session, name: str) -> Job | None:
    """The newest job named ``name`` if it is one user's (active jobs win over finished ones)."""
    named = select(Job).where(Job.name == name, Job.array_job_id.is_(None))
    jobs = list(session.scalars(named.order_by(Job.seq.desc())))
    active = [job for job in jobs if job.state in ACTIVE]
    candidates = active or jobs
    users = sorted({job.user for job in candidates})
    if len(users) > 1:
        choices = ", ".join(f"{user}~{name}" for user in users)
        raise ApiError(
            409,
            "AmbiguousJobName",
            f"{len(users)} users have {'active ' if active else ''}jobs named {name!r}; "
            f"name one as USER~NAME: {choices}",
            [{"path": "job", "message": f"{user}~{name}"} for user in users],
        )
    return candidates[0] if candidates else None


def stop(ctx: ServerContext, principal: Principal, ref: str) -> Job:
    """Stop a job; an array's parent stops every element with it (``stopping.stop_array``)."""
    now = ctx.clock()
    with ctx.db.write() as session:
        job = find_job(session, principal, ref)
        if job.array_size is not None:
            stop_array(session, job, principal.user, now)
        else:
            stop_job(session, job, principal.user, now)
        if job.user != principal.user:  # an admin stops someone else's job
            detail = {"owner": job.user, "name": job.name}
            audit.record(session, now, principal, "job.stop", f"job {job.id}", detail)
    ctx.wake_agents(noted_news(session))
    ctx.wake_scheduler()
    return job


_BY_STATE = select(Job.state, func.count()).group_by(Job.state)


def jobs_by_state(session: Session) -> dict[str, int]:
    """How many jobs are in each state (every state named), counted in SQL from ix_jobs_state
    alone; an array counts as its parent and its elements."""
    counts: dict[str, int] = dict(session.execute(_BY_STATE).all())
    return {s.value: int(counts.get(s.value, 0)) for s in State}


MASK = "******"


def masked_source(text: str, secrets: dict[str, object]) -> str:
    """The job file as submitted, with its secrets' values replaced by ``******`` (docs/audit.md,
    "Secrets"): every line ``KEY: VALUE`` whose value is a secret's, and every other occurrence
    of a secret of 4 characters or more (a shorter one would mask ordinary text)."""
    values = {str(v) for v in secrets.values() if str(v)}
    if not values:
        return text
    lines = []
    for line in text.splitlines(keepends=True):
        key, colon, value = line.partition(":")
        bare = value.strip().strip("'\"")
        ending = "\n" if line.endswith("\n") else ""
        lines.append(f"{key}: {MASK}{ending}" if colon and bare in values else line)
    masked = "".join(lines)
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= 4:
            masked = masked.replace(value, MASK)
    return masked
