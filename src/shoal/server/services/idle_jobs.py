"""Stopping idle interactive jobs (docs/notebooks.md, "Idle timeout"), after JupyterHub's culler:
a job with ``interactive: true`` in a VC with an ``idle_timeout_s`` is stopped once no request
has reached its tasks through the task proxy for that long, with a warning in its events a
while before (a quarter of the timeout, at most 10 minutes).

Idle since: the last proxy request (``ctx.proxy_activity``, this process's memory), else when the
job started, else when this server started (a restart never stops a job at once). ``decide`` is
pure; ``sweep`` reads the store, decides, and writes the events and stops."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from shoal.core.states import State
from shoal.server.context import ServerContext
from shoal.server.notify import noted_news
from shoal.server.services.events import record
from shoal.server.services.stopping import stop_job
from shoal.spec.units import format_duration
from shoal.store.models import Job, VirtualClusterRow

WARN_LEAD_MAX_S = 600.0
WARN, STOP = "warn", "stop"


@dataclass(frozen=True)
class IdleJob:
    job_id: str
    vc: str
    since: float  # idle since (wall clock)
    timeout_s: float


@dataclass(frozen=True)
class Verdict:
    job: IdleJob
    action: str  # WARN or STOP
    idle_s: float


def warn_lead(timeout_s: float) -> float:
    return min(WARN_LEAD_MAX_S, timeout_s / 4)


def decide(jobs: list[IdleJob], warned: set[str], now: float) -> list[Verdict]:
    """What to do about each job: stop it once idle for its timeout; warn it once when idle
    within ``warn_lead`` of it."""
    verdicts = []
    for job in jobs:
        idle = now - job.since
        if idle >= job.timeout_s:
            verdicts.append(Verdict(job, STOP, idle))
        elif idle >= job.timeout_s - warn_lead(job.timeout_s) and job.job_id not in warned:
            verdicts.append(Verdict(job, WARN, idle))
    return verdicts


def sweep(ctx: ServerContext, now: float) -> list[Verdict]:
    """Check the interactive jobs of VCs with an idle timeout; warn and stop as ``decide`` says."""
    with ctx.db.read() as session:
        timeouts = {
            name: float(timeout)
            for name, timeout in session.execute(
                select(VirtualClusterRow.name, VirtualClusterRow.idle_timeout_s)
            )
            if timeout is not None
        }
        if not timeouts:
            return []
        rows = session.execute(
            select(Job.id, Job.virtual_cluster, Job.launched_at, Job.spec).where(
                Job.state == State.RUNNING.value, Job.virtual_cluster.in_(list(timeouts))
            )
        ).all()
    jobs = [
        IdleJob(job_id, vc, _since(ctx, job_id, launched), timeouts[vc])
        for job_id, vc, launched, spec in rows
        if (spec or {}).get("interactive")
    ]
    _forget_active(ctx, jobs)
    verdicts = decide(jobs, ctx.idle_warned, now)
    if verdicts:
        _apply(ctx, verdicts, now)
    return verdicts


def _since(ctx: ServerContext, job_id: str, launched_at: float | None) -> float:
    return max(ctx.proxy_activity.get(job_id, 0.0), launched_at or 0.0, ctx.started_at)


def _forget_active(ctx: ServerContext, jobs: list[IdleJob]) -> None:
    """A warned job used again may be warned again later; gone jobs are forgotten."""
    live = {job.job_id: job for job in jobs}
    for job_id in list(ctx.idle_warned):
        job = live.get(job_id)
        if job is None or job.since > ctx.clock() - (job.timeout_s - warn_lead(job.timeout_s)):
            ctx.idle_warned.discard(job_id)
    for job_id in set(ctx.proxy_activity) - set(live):
        ctx.proxy_activity.pop(job_id, None)


def _apply(ctx: ServerContext, verdicts: list[Verdict], now: float) -> None:
    with ctx.db.write() as session:
        for verdict in verdicts:
            job = session.get(Job, verdict.job.job_id)
            if job is None or job.state != State.RUNNING.value:
                continue
            if verdict.action == WARN:
                record(session, job.id, now, "idle", _warning(verdict))
                ctx.idle_warned.add(job.id)
            else:
                record(session, job.id, now, "idle-stop", _stopping(verdict))
                stop_job(session, job, f"the idle timeout of VC {job.virtual_cluster}", now)
                ctx.idle_warned.discard(job.id)
        news = noted_news(session)
    ctx.wake_agents(news)
    ctx.wake_scheduler()


def _warning(verdict: Verdict) -> str:
    job = verdict.job
    left = max(0, round(job.timeout_s - verdict.idle_s))
    return (
        f"idle for {format_duration(round(verdict.idle_s))}: stopped in {format_duration(left)} "
        f"unless its pages are used (VC {job.vc}'s idle timeout: "
        f"{format_duration(round(job.timeout_s))})"
    )


def _stopping(verdict: Verdict) -> str:
    job = verdict.job
    return (
        f"stopped: no request through the task proxy for {format_duration(round(verdict.idle_s))}"
        f" (VC {job.vc}'s idle timeout: {format_duration(round(job.timeout_s))})"
    )
