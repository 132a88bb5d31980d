"""Running an ended job again as its next attempt (OpenPAI's ``executionType: START``).

The job keeps its id, name, submission time, file and events; its outcome is cleared and it goes
back to the queue (``JobEvent.RESTARTED``, the one way out of a final state). Its next placement
is its next attempt. An array or an array's element is not restarted one by one."""

from __future__ import annotations

from shoal.core.states import JobEvent, State, advance_job
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services.events import record
from shoal.server.services.image_holds import hold_if_missing
from shoal.server.services.snapshot import spec_of
from shoal.store.models import Job


def restart(ctx: ServerContext, principal: Principal, job_id: str) -> bool:
    """Queue the ended job ``job_id`` again; False if it had not ended (nothing to do)."""
    now = ctx.clock()
    with ctx.db.write() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise ApiError(404, "NoJobError", f"job {job_id} is not found")
        state = State(job.state)
        if job.array_size is not None or job.array_job_id is not None:
            raise ApiError(
                400,
                "InvalidParametersError",
                f"job {job.name} is part of an array; submit the array again instead",
            )
        if state is State.STOPPING:
            raise ApiError(
                400,
                "InvalidParametersError",
                f"job {job.name} is stopping; start it again once it has stopped",
            )
        if not state.is_terminal:
            return False
        job.state = advance_job(state, JobEvent.RESTARTED).value
        job.version += 1
        job.completed_at = None
        job.exit_class = job.exit_code = None
        job.diagnostics = ""
        job.stop_requested = False
        job.completing = None
        job.preempted_by = None
        job.pending_code = job.pending_message = None
        record(
            session,
            job.id,
            now,
            "restarted",
            f"run again by {principal.user} after it ended {state.value}: "
            f"its next placement is attempt {job.attempt + 1}",
        )
        if not ctx.settings.kubernetes:  # Kubernetes' nodes pull images themselves
            hold_if_missing(session, job, spec_of(job), now)  # its image may have been removed
    ctx.wake_scheduler()
    return True
