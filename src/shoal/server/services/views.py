"""Turn store rows into API bodies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.schemas import (
    BlockerOut,
    EventOut,
    JobDetail,
    JobSummary,
    PendingReasonOut,
    Retries,
    TaskOut,
)
from shoal.store.models import Event, Job, Task


def job_summary(job: Job, position: int | None = None, nodes: Sequence[str] = ()) -> JobSummary:
    roles = job.spec.get("roles", [])
    pending = None
    if job.pending_code is not None:
        pending = PendingReasonOut(
            code=job.pending_code,
            message=job.pending_message or "",
            position=position,
        )
    return JobSummary(
        id=job.id,
        name=job.name,
        user=job.user,
        virtualCluster=job.virtual_cluster,
        state=job.state,
        priorityClass=job.priority_class,
        submittedAt=job.submitted_at,
        launchedAt=job.launched_at,
        completedAt=job.completed_at,
        attempt=job.attempt,
        taskCount=sum(r["instances"] for r in roles),
        gpus=sum(r["instances"] * r["resources"]["gpu"] for r in roles),
        exitClass=job.exit_class,
        exitCode=job.exit_code,
        pending=pending,
        nodes=list(nodes),
    )


def task_out(task: Task) -> TaskOut:
    return TaskOut(
        role=task.role,
        index=task.index,
        attempt=task.attempt,
        job_attempt=task.job_attempt,
        state=task.state,
        node=task.node,
        address=task.address,
        gpus=list(task.gpu_indices),
        ports={label: list(ports) for label, ports in task.ports},
        pid=task.pid,
        exitCode=task.exit_code,
        exitClass=task.exit_class,
        diagnostics=task.diagnostics,
        startedAt=task.started_at,
        finishedAt=task.finished_at,
        usage=dict(task.usage),
    )


def current_tasks(session: Session, job: Job) -> Sequence[Task]:
    return session.scalars(
        select(Task).where(Task.job_id == job.id, Task.job_attempt == job.attempt).order_by(Task.id)
    ).all()


def job_detail(session: Session, job: Job, position: int | None = None) -> JobDetail:
    tasks = current_tasks(session, job)
    summary = job_summary(job, position, _distinct(t.node for t in tasks))
    return JobDetail(
        **summary.model_dump(),
        diagnostics=job.diagnostics,
        format=job.source_format,
        roles=list(job.spec.get("roles", [])),
        tasks=[task_out(t) for t in tasks],
        retries=Retries(
            user=job.retries_user, platform=job.retries_platform, resource=job.retries_resource
        ),
    )


def _distinct(nodes: Iterable[str]) -> list[str]:
    return sorted({node for node in nodes if node})


def nodes_of(session: Session, jobs: Sequence[Job]) -> dict[str, list[str]]:
    """The nodes of each job's current attempt, in one query."""
    attempts = {job.id: job.attempt for job in jobs}
    found: dict[str, set[str]] = {}
    if not attempts:
        return {}
    rows = session.execute(
        select(Task.job_id, Task.job_attempt, Task.node).where(Task.job_id.in_(list(attempts)))
    )
    for job_id, attempt, node in rows:
        if attempts.get(job_id) == attempt and node:
            found.setdefault(job_id, set()).add(node)
    return {job_id: sorted(nodes) for job_id, nodes in found.items()}


def job_refs(session: Session, job_ids: Sequence[str], gpus: dict[str, int]) -> list[BlockerOut]:
    """Jobs named by id as ``id (user/name, N GPUs)`` material, in the order given."""
    if not job_ids:
        return []
    jobs = {j.id: j for j in session.scalars(select(Job).where(Job.id.in_(list(job_ids))))}
    return [
        BlockerOut(
            id=job_id,
            user=jobs[job_id].user,
            name=jobs[job_id].name,
            virtualCluster=jobs[job_id].virtual_cluster,
            gpus=gpus.get(job_id, 0),
        )
        for job_id in job_ids
        if job_id in jobs
    ]


def job_events(session: Session, job: Job) -> list[EventOut]:
    rows = session.scalars(select(Event).where(Event.job_id == job.id).order_by(Event.at, Event.id))
    return [
        EventOut(at=e.at, kind=e.kind, message=e.message, role=e.role, index=e.index) for e in rows
    ]
