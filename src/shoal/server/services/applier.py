"""Write a ``Plan`` to the store with guarded updates: a decision made on a stale snapshot (the job
changed since) is dropped, never half-applied."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.plan import Admission, PendingReason, Plan, Preemption
from shoal.core.states import JobEvent, State, advance_job
from shoal.server.context import ServerContext
from shoal.server.services.events import record
from shoal.server.services.jobs import request_kill
from shoal.store.models import Job, Task


def apply_plan(ctx: ServerContext, plan: Plan, versions: dict[str, int]) -> int:
    """Apply ``plan``; returns how many jobs were admitted."""
    now = ctx.clock()
    admitted = 0
    waiting = [(p.job_id, p.reason) for p in plan.pending]
    waiting += [(i.job_id, i.reason) for i in plan.infeasible]
    changed = [(j, r) for j, r in waiting if ctx.reasons.get(j) != (r.code.value, r.message)]
    ctx.positions = {p.job_id: p.position for p in plan.pending}
    if not plan.admissions and not changed and not plan.preemptions:
        return 0  # nothing to write: no transaction (every commit costs an fsync)
    with ctx.db.write() as session:
        # One query loads every job the plan names, so the lookups below cost no query and no
        # early flush, and the writes go out together at commit.
        named = [a.job_id for a in plan.admissions] + [j for j, _ in changed]
        named += [p.victim_job_id for p in plan.preemptions]
        loaded = session.scalars(select(Job).where(Job.id.in_(named))).all()
        for admission in plan.admissions:
            job = _current(session, admission.job_id, versions)
            if job is not None:
                _admit(session, job, admission, now)
                ctx.reasons.pop(job.id, None)
                admitted += 1
        for job_id, reason in changed:  # reasons unchanged since last written are skipped
            job = _current(session, job_id, versions)
            if job is not None:
                _mark_pending(session, job, reason, now)
                ctx.reasons[job_id] = (reason.code.value, reason.message)
        preempted = sum(_preempt(session, p, now) for p in plan.preemptions)
        del loaded
    if admitted or preempted:
        ctx.wake_agents()
    return admitted


def _current(session: Session, job_id: str, versions: dict[str, int]) -> Job | None:
    job = session.get(Job, job_id)
    if job is None or job.version != versions.get(job_id) or job.state != State.WAITING.value:
        return None
    if job.completing is not None or job.stop_requested:
        return None
    return job


def _admit(session: Session, job: Job, admission: Admission, now: float) -> None:
    job.state = advance_job(State.WAITING, JobEvent.ADMITTED).value
    job.version += 1
    job.attempt += 1
    job.launched_at = job.launched_at or now
    job.pending_code = job.pending_message = None
    nodes = sorted({p.node for p in admission.placements})
    for placement in admission.placements:
        session.add(
            Task(
                job_id=job.id,
                job_attempt=job.attempt,
                role=placement.role,
                index=placement.index,
                attempt=1,
                state=State.WAITING.value,
                node=placement.node,
                address=placement.address,
                cpu_millis=placement.resources.cpu_millis,
                memory_mib=placement.resources.memory_mib,
                gpu_indices=list(placement.gpu_indices),
                ports=[[label, list(ports)] for label, ports in placement.ports],
                created_at=now,
            )
        )
    record(
        session,
        job.id,
        now,
        "placed",
        f"attempt {job.attempt}: all {len(admission.placements)} tasks placed on "
        f"{', '.join(nodes)}",
    )


def _preempt(session: Session, preemption: Preemption, now: float) -> bool:
    """Stop the victim's tasks; it returns to the queue (keeping its place) once they exit."""
    victim = session.get(Job, preemption.victim_job_id)
    if victim is None or victim.state != State.RUNNING.value:
        return False
    if victim.completing is not None or victim.stop_requested:
        return False
    victim.completing = "preempted"
    victim.preempted_by = preemption.for_job_id
    victim.version += 1
    request_kill(session, victim.id)
    record(session, victim.id, now, "preempted", preemption.message)
    record(
        session,
        preemption.for_job_id,
        now,
        "preempting",
        f"job {victim.id} is being preempted to make room for this job",
    )
    return True


def _mark_pending(session: Session, job: Job, reason: PendingReason, now: float) -> None:
    changed = job.pending_code != reason.code.value or job.pending_message != reason.message
    job.pending_code = reason.code.value
    job.pending_message = reason.message
    if changed:
        record(session, job.id, now, "pending", f"{reason.code.value}: {reason.message}")
