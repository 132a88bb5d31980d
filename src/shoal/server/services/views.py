"""Turn store rows into API bodies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.arrays import ElementCounts
from shoal.server.schemas import (
    ArrayOut,
    BlockerOut,
    ElementOut,
    EventOut,
    JobDetail,
    JobSummary,
    PendingReasonOut,
    Retries,
    TaskOut,
)
from shoal.server.services.arrays import element_counts
from shoal.store.models import Event, Job, Task


def job_summary(
    job: Job,
    position: int | None = None,
    nodes: Sequence[str] = (),
    counts: ElementCounts | None = None,
) -> JobSummary:
    """``counts``: an array parent's elements by state (``arrays.element_counts``)."""
    roles = job.spec.get("roles", [])
    tasks = sum(r["instances"] for r in roles)
    gpus = sum(r["instances"] * r["resources"]["gpu"] for r in roles)
    array = array_out(job, counts)
    if array is not None:  # every element's tasks; the GPUs it may hold at once
        tasks *= array.size
        gpus *= array.size if array.cap is None else min(array.cap, array.size)
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
        taskCount=tasks,
        gpus=gpus,
        exitClass=job.exit_class,
        exitCode=job.exit_code,
        pending=pending,
        nodes=list(nodes),
        array=array,
        arrayJobId=job.array_job_id,
        arrayIndex=job.array_index,
    )


def array_out(job: Job, counts: ElementCounts | None) -> ArrayOut | None:
    """An array parent's elements (None for other jobs)."""
    if job.array_size is None:
        return None
    return ArrayOut(
        expression=str(job.spec.get("array") or ""),
        size=job.array_size,
        cap=job.array_cap,
        counts={state.value: n for state, n in counts.by_state.items()} if counts else {},
        held=counts.held if counts else 0,
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
    counts = None
    if job.array_size is not None:
        counts = element_counts(session.connection(), [job.id])[job.id]
    summary = job_summary(job, position, _distinct(t.node for t in tasks), counts)
    return JobDetail(
        **summary.model_dump(),
        diagnostics=job.diagnostics,
        format=job.source_format,
        roles=list(job.spec.get("roles", [])),
        tasks=[task_out(t) for t in tasks],
        retries=Retries(
            user=job.retries_user, platform=job.retries_platform, resource=job.retries_resource
        ),
        elements=None if job.array_size is None else elements_of(session, job),
    )


_ELEMENTS = select(
    Job.id,
    Job.array_index,
    Job.state,
    Job.pending_code,
    Job.pending_message,
    Job.launched_at,
    Job.completed_at,
    Job.exit_class,
    Job.exit_code,
).order_by(Job.array_index)
_ELEMENT_NODES = (
    select(Task.job_id, Task.node)
    .join(Job, (Job.id == Task.job_id) & (Job.attempt == Task.job_attempt))
    .distinct()
)


def elements_of(session: Session, parent: Job) -> list[ElementOut]:
    """An array's elements by index, with the nodes of their current attempts: two queries of
    plain rows (an array has up to 10,000 elements)."""
    connection = session.connection()
    nodes: dict[str, list[str]] = {}
    for job_id, node in connection.execute(_ELEMENT_NODES.where(Job.array_job_id == parent.id)):
        if node:
            nodes.setdefault(job_id, []).append(node)
    return [
        ElementOut(
            id=e.id,
            index=e.array_index or 0,
            state=e.state,
            pending=None
            if e.pending_code is None
            else PendingReasonOut(code=e.pending_code, message=e.pending_message or ""),
            launchedAt=e.launched_at,
            completedAt=e.completed_at,
            exitClass=e.exit_class,
            exitCode=e.exit_code,
            nodes=sorted(nodes.get(e.id, [])),
        )
        for e in connection.execute(_ELEMENTS.where(Job.array_job_id == parent.id))
    ]


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
