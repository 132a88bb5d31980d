"""A cloud machine's agent says its cloud will preempt it (docs/cloud.md): drain the node, and
requeue every job with a task there as a preemption does: SIGTERM, the kill grace to
checkpoint, SIGKILL; the job goes back to the queue keeping its submission time, so its place.
Each notice is acted on once per server process (a later report repeats it)."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.nodestates import Hold, NodeEvent
from shoal.core.states import State
from shoal.protocol import PreemptionNotice
from shoal.server.context import ServerContext
from shoal.server.services import audit
from shoal.server.services.events import record
from shoal.server.services.lifecycle import PREEMPTED
from shoal.server.services.node_life import change_node, record_node_event
from shoal.server.services.nodes import HOLDING
from shoal.server.services.stopping import request_kill
from shoal.store.models import Job, Node, Task

CLOUD_PREEMPTED = "node:"  # ``jobs.preempted_by`` of a job whose node its cloud took back


def is_new(ctx: ServerContext, node: str, notice: PreemptionNotice | None) -> bool:
    return notice is not None and ctx.preemption_notices.get(node) != notice.event_id


def note_preemption(
    ctx: ServerContext, session: Session, name: str, notice: PreemptionNotice, now: float
) -> bool:
    """Act on a new notice for node ``name``; whether anything changed."""
    if not is_new(ctx, name, notice):
        return False
    ctx.preemption_notices[name] = notice.event_id
    node = session.get(Node, name)
    if node is None:
        return False
    when = ""
    if notice.not_before is not None:
        when = f" at {time.strftime('%H:%M:%S', time.gmtime(notice.not_before))} UTC"
    said = f"its cloud will preempt it{when} (event {notice.event_id}): no new tasks"
    record_node_event(session, name, now, "cloud.preempt-notice", said, by="cloud")
    if node.hold != Hold.DRAINING.value:
        change_node(session, node, NodeEvent.DRAIN, now, by="cloud")
    requeued = _requeue_jobs_on(session, name, now)
    detail = {"event": notice.event_id, "notBefore": notice.not_before, "jobs": requeued}
    audit.record(session, now, f"node:{name}", "cloud.preempt-notice", f"node {name}", detail)
    return True


def _requeue_jobs_on(session: Session, node: str, now: float) -> list[str]:
    held = select(Task.job_id).where(Task.node == node, Task.state.in_(HOLDING))
    query = select(Job).where(Job.id.in_(held))  # no DISTINCT over JSON columns (PostgreSQL)
    requeued = []
    for job in session.scalars(query):
        if job.state != State.RUNNING.value or job.completing is not None or job.stop_requested:
            continue
        job.completing = PREEMPTED
        job.preempted_by = f"{CLOUD_PREEMPTED}{node}"
        job.version += 1
        request_kill(session, job.id)
        record(
            session,
            job.id,
            now,
            "preempted",
            f"its node {node} is being preempted by its cloud: its tasks are stopped (SIGTERM, "
            "then the kill grace to checkpoint) and it goes back to the queue",
        )
        requeued.append(job.id)
    return requeued
