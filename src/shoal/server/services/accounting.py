"""Accounting (Slurm's ``sacct``): what each job used, and sums per user or virtual cluster.

Per job, over every task row of every job attempt (a task retried in place keeps one row: what
its earlier attempts used is folded into ``Task.earlier_usage`` by ``fold_attempt``):
- elapsed: first task start to last task end (now, while a task still runs);
- GPU-hours: the sum over tasks of GPUs x run time;
- CPU seconds: the sum of the tasks' ``cpuSeconds`` (their process trees, sampled by the agent);
- peak memory: the largest ``maxRssMiB`` of one task.

``account`` is pure (the clock comes in as ``now``); the loaders do one query per call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from shoal.server.admin_schemas import UsageRow
from shoal.server.autoscaling.costs import charges
from shoal.server.schemas import Accounting
from shoal.store.models import Job, Task

ACTIVE = ("WAITING", "RUNNING", "STOPPING")


@dataclass(frozen=True)
class TaskRun:
    """One task row's part in the accounts."""

    gpus: int
    started_at: float | None
    finished_at: float | None
    usage: dict[str, Any]
    earlier: dict[str, Any] = field(default_factory=dict)  # its earlier attempts, folded


def fold_attempt(
    earlier: dict[str, Any],
    started_at: float | None,
    finished_at: float | None,
    usage: dict[str, Any],
) -> dict[str, Any]:
    """``earlier`` with one more finished attempt of the task added (run time, CPU, peak
    memory, first start): what a task retried in place keeps of the attempt it leaves."""
    run = 0.0 if started_at is None or finished_at is None else max(finished_at - started_at, 0)
    first, last = earlier.get("firstStartedAt"), earlier.get("lastFinishedAt")
    if started_at is not None:
        first = started_at if first is None else min(float(first), started_at)
    if finished_at is not None:
        last = finished_at if last is None else max(float(last), finished_at)
    return {
        "attempts": int(earlier.get("attempts", 0)) + 1,
        "runSeconds": round(float(earlier.get("runSeconds", 0.0)) + run, 3),
        "cpuSeconds": round(
            float(earlier.get("cpuSeconds", 0.0)) + float(usage.get("cpuSeconds", 0.0)), 3
        ),
        "maxRssMiB": max(float(earlier.get("maxRssMiB", 0.0)), float(usage.get("maxRssMiB", 0.0))),
        "firstStartedAt": first,
        "lastFinishedAt": last,
    }


def account(tasks: Iterable[TaskRun], job_end: float | None, now: float) -> Accounting:
    """A job's accounting; a started task with no end runs until ``job_end`` (the job's
    completion) or, while the job is active, ``now``."""
    first: float | None = None
    last: float | None = None
    gpu_seconds = cpu_seconds = peak = 0.0
    for task in tasks:
        cpu_seconds += float(task.usage.get("cpuSeconds", 0.0))
        cpu_seconds += float(task.earlier.get("cpuSeconds", 0.0))
        peak = max(peak, float(task.usage.get("maxRssMiB", 0.0)))
        peak = max(peak, float(task.earlier.get("maxRssMiB", 0.0)))
        gpu_seconds += task.gpus * float(task.earlier.get("runSeconds", 0.0))
        if task.earlier.get("firstStartedAt") is not None:
            earliest = float(task.earlier["firstStartedAt"])
            first = earliest if first is None else min(first, earliest)
        if task.earlier.get("lastFinishedAt") is not None:
            latest = float(task.earlier["lastFinishedAt"])
            last = latest if last is None else max(last, latest)
        if task.started_at is None:
            continue
        end = task.finished_at if task.finished_at is not None else (job_end or now)
        end = max(end, task.started_at)
        gpu_seconds += task.gpus * (end - task.started_at)
        first = task.started_at if first is None else min(first, task.started_at)
        last = end if last is None else max(last, end)
    elapsed = 0.0 if first is None or last is None else last - first
    return Accounting(
        elapsedS=round(elapsed, 3),
        gpuHours=round(gpu_seconds / 3600, 6),
        cpuSeconds=round(cpu_seconds, 3),
        peakMemoryMiB=round(peak, 1),
    )


_RUN_COLUMNS = (Task.gpu_indices, Task.started_at, Task.finished_at, Task.usage, Task.earlier_usage)


def _runs_by_job(
    session: Session, job_ids: Sequence[str], parents: Sequence[str] = ()
) -> dict[str, list[TaskRun]]:
    """Each job's task runs; an array's parent (``parents``) has its elements' tasks."""
    runs: dict[str, list[TaskRun]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return runs
    rows = list(
        session.execute(select(Task.job_id, *_RUN_COLUMNS).where(Task.job_id.in_(list(job_ids))))
    )
    if parents:
        rows += session.execute(
            select(Job.array_job_id, *_RUN_COLUMNS)
            .join(Job, Job.id == Task.job_id)
            .where(Job.array_job_id.in_(list(parents)))
        )
    for job_id, gpus, started, finished, usage, earlier in rows:
        runs[job_id].append(
            TaskRun(len(gpus or ()), started, finished, dict(usage or {}), dict(earlier or {}))
        )
    return runs


def job_accounts(session: Session, jobs: Sequence[Job], now: float) -> dict[str, Accounting]:
    """Each job's accounting, in one query (two with arrays: a parent sums its elements')."""
    parents = [job.id for job in jobs if job.array_size is not None]
    runs = _runs_by_job(session, [job.id for job in jobs], parents)
    return {
        job.id: account(runs[job.id], None if job.state in ACTIVE else job.completed_at, now)
        for job in jobs
    }


def usage(
    session: Session, by: str, since_s: float | None, now: float, user: str | None = None
) -> list[UsageRow]:
    """Sums per user or VC over the jobs active at any time in the window (a job counts whole,
    with all it used); ``user``: only that user's jobs. An array counts by its elements. One
    query, read in chunks and folded job by job: memory does not grow with the history."""
    query = (
        select(Job.id, Job.user, Job.virtual_cluster, Job.state, Job.completed_at, *_RUN_COLUMNS)
        .outerjoin(Task, Task.job_id == Job.id)
        .where(Job.array_size.is_(None))
        .order_by(Job.id)
        .execution_options(yield_per=2000)
    )
    if since_s is not None:
        query = query.where(or_(Job.completed_at.is_(None), Job.completed_at >= now - since_s))
    if user is not None:
        query = query.where(Job.user == user)
    sums: dict[str, dict[str, float]] = {}
    job: Any = None
    runs: list[TaskRun] = []
    for row in session.execute(query):
        if job is None or row.id != job.id:
            _add(sums, by, job, runs, now)
            job, runs = row, []
        if row.gpu_indices is not None:  # the job has tasks (the outer join's other rows)
            gpus, started, finished = len(row.gpu_indices), row.started_at, row.finished_at
            runs.append(
                TaskRun(
                    gpus, started, finished, dict(row.usage or {}), dict(row.earlier_usage or {})
                )
            )
    _add(sums, by, job, runs, now)
    pools = charges(session, by, since_s, now, user)  # what cloud pool machines cost them
    return [
        UsageRow(
            key=key,
            jobs=int(row["jobs"]),
            gpuHours=round(row["gpu"], 6),
            cpuHours=round(row["cpu"], 6),
            elapsedHours=round(row["elapsed"], 6),
            peakMemoryMiB=round(row["mem"], 1),
            poolNodeHours=round(pools[key].node_hours if key in pools else 0.0, 6),
            poolCost=round(pools[key].cost if key in pools else 0.0, 6),
        )
        for key, row in sorted(sums.items(), key=lambda item: (-item[1]["gpu"], item[0]))
    ]


def _add(
    sums: dict[str, dict[str, float]], by: str, job: Any, runs: list[TaskRun], now: float
) -> None:
    """Add one job (a row of ``usage``'s query) and its task runs to the sums."""
    if job is None:
        return
    key = job.user if by == "user" else job.virtual_cluster
    row = sums.setdefault(key, {"jobs": 0, "gpu": 0.0, "cpu": 0.0, "elapsed": 0.0, "mem": 0.0})
    used = account(runs, None if job.state in ACTIVE else job.completed_at, now)
    row["jobs"] += 1
    row["gpu"] += used.gpuHours
    row["cpu"] += used.cpuSeconds / 3600
    row["elapsed"] += used.elapsedS / 3600
    row["mem"] = max(row["mem"], used.peakMemoryMiB)
