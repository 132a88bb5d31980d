"""``POST /api/v1/jobs/plan``: where would a job go on the cluster as it is now? Read-only: the
same snapshot and the same ``core.schedule`` as the scheduler loop, with the job appended to the
queue; nothing is stored."""

from __future__ import annotations

from dataclasses import replace

from shoal.core.envcontract import JobEnvironment
from shoal.core.plan import Plan
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, JobRequest
from shoal.planning import env_job, job_request
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import PendingReasonOut, PlannedTask, PlanOut, PlanRequest, SubmitRequest
from shoal.server.services.snapshot import load_snapshot
from shoal.server.services.submission import parse_submission
from shoal.spec.model import JobSpec

DRY_RUN_ID = "dry-run"  # never a real job id (those are numbers)


def plan_jobs(ctx: ServerContext, principal: Principal, request: PlanRequest) -> list[PlanOut]:
    return check_jobs(ctx, principal, request)[0]


def check_jobs(
    ctx: ServerContext, principal: Principal, request: PlanRequest
) -> tuple[list[PlanOut], list[dict[str, object]]]:
    """The dry run's plans and the file's warnings; ``ApiError`` (400) for a file with errors."""
    submission = SubmitRequest(
        spec=request.spec,
        format=request.format,
        params=request.params,
        virtual_cluster=request.virtual_cluster,
    )
    _, specs, warnings = parse_submission(submission)
    return _plans(ctx, principal, request, specs), warnings


def _plans(
    ctx: ServerContext, principal: Principal, request: PlanRequest, specs: list[JobSpec]
) -> list[PlanOut]:
    now = ctx.clock()
    with ctx.db.read() as session:
        snapshot, _ = load_snapshot(ctx, session)
    return [_plan_one(snapshot, spec, principal, request, now) for spec in specs]


def _plan_one(
    snapshot: ClusterSnapshot,
    spec: JobSpec,
    principal: Principal,
    request: PlanRequest,
    now: float,
) -> PlanOut:
    vc = request.virtual_cluster or spec.virtual_cluster or "default"
    task = None if request.task is None else _task(request.task, spec)
    base = job_request(spec, DRY_RUN_ID, now, vc)
    candidate = JobRequest(DRY_RUN_ID, base.roles, base.priority, now, vc, principal.user)
    plan = schedule(replace(snapshot, queue=(*snapshot.queue, candidate)), now)
    admission = next((a for a in plan.admissions if a.job_id == DRY_RUN_ID), None)
    out = PlanOut(
        name=spec.name,
        admitted=admission is not None,
        preempting=_victims(plan),
        nodes=len(snapshot.nodes),
    )
    if admission is None:
        reason = plan.reason_for(DRY_RUN_ID)
        if reason is not None:
            out.reason = PendingReasonOut(code=reason.code.value, message=reason.message)
        return out
    out.placements = [
        PlannedTask(
            role=p.role,
            index=p.index,
            node=p.node,
            address=p.address,
            gpus=list(p.gpu_indices),
            ports={label: list(ports) for label, ports in p.ports},
        )
        for p in admission.placements
    ]
    if task is not None:
        environment = JobEnvironment(
            env_job(spec, DRY_RUN_ID, principal.user, vc), admission.placements
        )
        out.env = environment.for_task(*task)
    return out


def _victims(plan: Plan) -> list[str]:
    return [p.victim_job_id for p in plan.preemptions if p.for_job_id == DRY_RUN_ID]


def _task(task: str, spec: JobSpec) -> tuple[str, int]:
    role, _, index_text = task.partition("/")
    names = [r.name for r in spec.roles]
    if role not in names:
        raise ApiError(422, "NoTaskError", f"task: no role {role!r}; roles: {', '.join(names)}")
    instances = spec.role(role).instances
    if not (index_text or "0").isdigit() or int(index_text or 0) >= instances:
        raise ApiError(
            422, "NoTaskError", f"task: index must be 0..{instances - 1}, got {index_text!r}"
        )
    return role, int(index_text or 0)
