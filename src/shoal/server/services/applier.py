"""Write a ``Plan`` to the store with guarded updates: a decision made on a stale snapshot (the job
changed since, or a node it places on is no longer schedulable or no longer has the room) is
dropped, never half-applied: the job stays queued and the next cycle decides again."""

from __future__ import annotations

import logging

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from shoal.core.plan import Admission, PendingReason, Plan, Preemption
from shoal.core.recheck import Held, recheck_admission
from shoal.core.states import JobEvent, State, advance_job
from shoal.protocol import task_address
from shoal.server.context import ServerContext
from shoal.server.notify import note_news, noted_news
from shoal.server.services.arrays import element_admitted
from shoal.server.services.events import record
from shoal.server.services.nodes import HOLDING, node_state
from shoal.server.services.stopping import request_kill
from shoal.store.models import Job, Node, Task

log = logging.getLogger("shoal.scheduler")


def apply_plan(ctx: ServerContext, plan: Plan, versions: dict[str, int]) -> int:
    """Apply ``plan``; returns how many jobs were admitted."""
    now = ctx.clock()
    admitted = 0
    waiting = [(p.job_id, p.reason) for p in plan.pending]
    waiting += [(i.job_id, i.reason) for i in plan.infeasible]
    changed = [(j, r) for j, r in waiting if ctx.reasons.get(j) != (r.code.value, r.message)]
    if not plan.admissions and not changed and not plan.preemptions:
        return 0  # nothing to write: no transaction (every commit costs an fsync)
    with ctx.db.write() as session:
        if ctx.scheduler_lease is not None:  # a plan of a scheduler whose lease was taken over
            ctx.scheduler_lease.check(session)  # is refused (StaleLeader), nothing written
        # One query loads every job the plan names, so the lookups below cost no query and no
        # early flush, and the writes go out together at commit.
        named = [j for j, _ in changed] + [p.victim_job_id for p in plan.preemptions]
        loaded = session.scalars(_JOBS, {"ids": named}).all() if named else []
        for admission in plan.admissions:
            if _admit(session, admission, versions.get(admission.job_id), now):
                ctx.reasons.pop(admission.job_id, None)
                admitted += 1
        for job_id, reason in changed:  # reasons unchanged since last written are skipped
            job = _current(session, job_id, versions)
            if job is not None:
                _mark_pending(session, job, reason, now)
                ctx.reasons[job_id] = (reason.code.value, reason.message)
        preempted = sum(_preempt(session, p, now) for p in plan.preemptions)
        del loaded
    if admitted or preempted:
        ctx.wake_agents(noted_news(session))  # the nodes placed on, the victims' nodes
    return admitted


def _current(session: Session, job_id: str, versions: dict[str, int]) -> Job | None:
    job = session.get(Job, job_id)
    if job is None or job.version != versions.get(job_id) or job.state != State.WAITING.value:
        return None
    if job.completing is not None or job.stop_requested:
        return None
    return job


_JOBS = select(Job).where(Job.id.in_(bindparam("ids", expanding=True)))
_RUNNING = advance_job(State.WAITING, JobEvent.ADMITTED).value
# The guarded write: the job is admitted only if it is still the version the snapshot saw, still
# waiting, and neither completing nor asked to stop. Plain statements, no ORM unit of work.
_ADMIT = (
    update(Job)
    .where(
        Job.id == bindparam("job_id"),
        Job.version == bindparam("seen"),
        Job.state == State.WAITING.value,
        Job.completing.is_(None),
        Job.stop_requested.is_(False),
        Job.array_held.is_(False),  # an array's parent, or an element its cap holds back
    )
    .values(
        state=_RUNNING,
        version=Job.version + 1,
        attempt=Job.attempt + 1,
        launched_at=func.coalesce(Job.launched_at, bindparam("now")),
        pending_code=None,
        pending_message=None,
    )
    .returning(Job.attempt, Job.array_job_id)
)
_INSERT_TASK = insert(Task)
_NODES = select(Node).where(Node.name.in_(bindparam("nodes", expanding=True)))
_HELD = select(Task.node, Task.cpu_millis, Task.memory_mib, Task.gpu_indices, Task.ports).where(
    Task.node.in_(bindparam("nodes", expanding=True)), Task.state.in_(HOLDING)
)


def still_fits(session: Session, admission: Admission) -> str | None:
    """Why the admission's nodes cannot take it any more (None: they can), read inside the
    write transaction: tasks inserted by earlier admissions of the same plan count too."""
    names = sorted({p.node for p in admission.placements})
    rows = session.connection().execute(_NODES, {"nodes": names}).all()
    nodes = {row.name: node_state(row) for row in rows}
    held_back = {
        row.name: row.state if row.state != "READY" else row.hold
        for row in rows
        if row.state != "READY" or row.hold != "NONE"
    }
    held_back |= {
        row.name: f"held by its platform ({row.platform_hold})"
        for row in rows
        if row.name not in held_back and row.platform_hold is not None
    }
    held = [
        Held(
            row.node,
            row.cpu_millis,
            row.memory_mib,
            tuple(row.gpu_indices),
            tuple(p for _, ports in row.ports for p in ports),
        )
        for row in session.connection().execute(_HELD, {"nodes": names})
    ]
    return recheck_admission(admission, nodes, held_back, held)


_PATTERNS = select(Node.name, Node.task_address).where(
    Node.name.in_(bindparam("nodes", expanding=True)), Node.task_address.is_not(None)
)


def _task_addresses(session: Session, admission: Admission) -> dict[str, str]:
    """The nodes of the admission whose tasks have addresses of their own (a Kubernetes Pod's
    DNS name in the pod-network mode), and their patterns."""
    names = sorted({p.node for p in admission.placements})
    rows = session.connection().execute(_PATTERNS, {"nodes": names})
    return {row.name: row.task_address for row in rows}


def _admit(session: Session, admission: Admission, seen: int | None, now: float) -> bool:
    """Admit the job with every task placed (gang), or not at all if it changed meanwhile."""
    if seen is None:
        return False
    why_not = still_fits(session, admission)
    if why_not is not None:
        log.info("placement of job %s dropped: %s", admission.job_id, why_not)
        record(
            session,
            admission.job_id,
            now,
            "replanned",
            f"placement dropped before it was written: {why_not}; the job stays queued",
        )
        return False
    connection = session.connection()
    params = {"job_id": admission.job_id, "seen": seen, "now": now}
    admitted = connection.execute(_ADMIT, params).first()
    if admitted is None:
        return False
    attempt, array_job_id = admitted
    patterns = _task_addresses(session, admission)
    rows = [
        {
            "job_id": admission.job_id,
            "job_attempt": attempt,
            "role": placement.role,
            "index": placement.index,
            "attempt": 1,
            "state": State.WAITING.value,
            "node": placement.node,
            "address": (
                task_address(
                    patterns[placement.node], admission.job_id, placement.role, placement.index
                )
                if placement.node in patterns
                else placement.address
            ),
            "cpu_millis": placement.resources.cpu_millis,
            "memory_mib": placement.resources.memory_mib,
            "gpu_indices": list(placement.gpu_indices),
            "ports": [[label, list(ports)] for label, ports in placement.ports],
            "launch_acked": False,
            "kill_requested": False,
            "created_at": now,
            "diagnostics": "",
            "usage": {},
            "log_bytes": {},
        }
        for placement in admission.placements
    ]
    connection.execute(_INSERT_TASK, rows)
    nodes = sorted({p.node for p in admission.placements})
    note_news(session, nodes)
    record(
        session,
        admission.job_id,
        now,
        "placed",
        f"attempt {attempt}: all {len(admission.placements)} tasks placed on {', '.join(nodes)}",
    )
    if array_job_id is not None:
        element_admitted(session, array_job_id, now)
    return True


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
