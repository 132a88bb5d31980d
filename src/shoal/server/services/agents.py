"""The agent protocol: an agent reports its nodes, running and exited tasks, and is told what to
launch and kill. One idempotent call (``sync``), long-polled, so nothing is lost when either side
restarts: reports are repeated until acknowledged, launches until the agent reports them running.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.envcontract import JobEnvironment
from shoal.core.lifecycle import ProcessExit
from shoal.core.plan import TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.states import State
from shoal.planning import env_job
from shoal.server.context import ServerContext
from shoal.server.schemas import (
    AgentNode,
    LaunchOrder,
    OrdersRequest,
    OrdersResponse,
    ReportRequest,
    ReportResponse,
)
from shoal.server.services.events import record
from shoal.server.services.lifecycle import on_exit, on_started
from shoal.server.services.snapshot import spec_of
from shoal.store.models import Job, Node, Task

ACTIVE_TASK = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


def task_by_attempt(session: Session, attempt_id: str) -> Task | None:
    task_id, _, attempt = attempt_id.partition(".")
    if not task_id.isdigit() or not attempt.isdigit():
        return None
    task = session.get(Task, int(task_id))
    if task is None or task.attempt != int(attempt):
        return None
    return task


def report(ctx: ServerContext, request: ReportRequest) -> ReportResponse:
    """Apply an agent's report: nodes, started and exited attempts (idempotent)."""
    acked, stale = _apply_reports(ctx, request)
    return ReportResponse(acked=acked, kill=stale)


def orders(ctx: ServerContext, request: OrdersRequest) -> OrdersResponse:
    """Launch and kill orders for the agent's nodes, waiting up to ``wait_s`` for some."""
    seen = ctx.agent_work.generation
    response = _orders(ctx, request)
    if not response.launch and not response.kill and request.wait_s > 0 and not ctx.closing:
        ctx.agent_work.wait(seen, request.wait_s)
        response = _orders(ctx, request)
    return response


def _quiet(ctx: ServerContext, request: ReportRequest, now: float) -> list[str] | None:
    """If the report changes nothing worth a write (heartbeats are written every few seconds),
    the attempts to kill; else None. Every commit costs an fsync, and reports come often."""
    if request.exited:
        return None
    every = min(5.0, ctx.settings.node_timeout_s / 4)
    stale: list[str] = []
    with ctx.db.read() as session:
        for report in request.nodes:
            node = session.get(Node, report.name)
            if node is None or node.state != "READY" or node.last_seen < now - every:
                return None
            if (node.cpu_millis, node.memory_mib, list(node.gpu_indices)) != (
                report.cpu_millis,
                report.memory_mib,
                list(report.gpu_indices),
            ):
                return None
        for running in request.running:
            task = task_by_attempt(session, running.attempt_id)
            if task is None or State(task.state).is_terminal:
                stale.append(running.attempt_id)
            elif not task.launch_acked or running.attempt_id not in ctx.seen_attempts:
                return None
        if _vanished(session, request):
            return None
    return stale


def _apply_reports(ctx: ServerContext, request: ReportRequest) -> tuple[list[str], list[str]]:
    now = ctx.clock()
    quiet = _quiet(ctx, request, now)
    if quiet is not None:
        return [], quiet
    acked: list[str] = []
    stale: list[str] = []
    changed = False
    with ctx.db.write() as session:
        for node in request.nodes:
            changed |= _upsert_node(session, request.agent_id, node, now)
        for running in request.running:
            task = task_by_attempt(session, running.attempt_id)
            if task is None or State(task.state).is_terminal:
                stale.append(running.attempt_id)  # not ours to run (any more): kill it
                continue
            if running.attempt_id not in ctx.seen_attempts and task.launch_acked:
                record(
                    session,
                    task.job_id,
                    now,
                    "adopted",
                    f"{task.role}[{task.index}] is still running on {task.node} (pid "
                    f"{running.pid}); the server picked it up again after a restart",
                    task.role,
                    task.index,
                )
            ctx.seen_attempts.add(running.attempt_id)
            on_started(session, task, running.pid, running.started_at)
            task.usage = dict(running.usage)
        for report in request.exited:
            task = task_by_attempt(session, report.attempt_id)
            if task is not None:
                result = ProcessExit(
                    report.exit_code,
                    report.signal,
                    report.stop_requested,
                    report.timed_out,
                    report.launch_error,
                )
                if task.started_at is None and report.started_at is not None:
                    task.started_at = report.started_at
                on_exit(session, task, result, report.finished_at, report.usage)
                changed = True
            ctx.seen_attempts.discard(report.attempt_id)
            acked.append(report.attempt_id)
        changed |= _lose_vanished(ctx, session, request, now)
    if changed:
        ctx.wake_scheduler()
        ctx.wake_agents()  # exits may have asked for kills (completion, job retry)
    return acked, stale


def _upsert_node(session: Session, agent_id: str, report: AgentNode, now: float) -> bool:
    node = session.get(Node, report.name)
    if node is None:
        session.add(
            Node(
                name=report.name,
                agent_id=agent_id,
                address=report.address,
                cpu_millis=report.cpu_millis,
                memory_mib=report.memory_mib,
                gpu_indices=list(report.gpu_indices),
                gpu_type=report.gpu_type,
                port_low=report.port_low,
                port_high=report.port_high,
                schedulable=True,
                state="READY",
                last_seen=now,
                registered_at=now,
                usage=dict(report.usage),
            )
        )
        return True
    came_back = node.state != "READY"
    node.agent_id, node.address = agent_id, report.address
    node.cpu_millis, node.memory_mib = report.cpu_millis, report.memory_mib
    node.gpu_indices, node.gpu_type = list(report.gpu_indices), report.gpu_type
    node.port_low, node.port_high = report.port_low, report.port_high
    node.state, node.last_seen, node.usage = "READY", now, dict(report.usage)
    return came_back


def _lose_vanished(
    ctx: ServerContext, session: Session, request: ReportRequest, now: float
) -> bool:
    """Tasks the agent once ran but no longer reports were lost with it (e.g. agent restart)."""
    lost = _vanished(session, request)
    for task in lost:
        on_exit(session, task, ProcessExit(None, lost=True), now)
    return bool(lost)


def _vanished(session: Session, request: ReportRequest) -> list[Task]:
    """Started tasks on the agent's nodes that its report neither runs nor reports as exited."""
    reported = {r.attempt_id for r in request.running} | {r.attempt_id for r in request.exited}
    started = session.scalars(
        select(Task).where(
            Task.node.in_([n.name for n in request.nodes]),
            Task.state.in_(ACTIVE_TASK),
            Task.launch_acked.is_(True),
        )
    )
    return [task for task in started if task.attempt_id not in reported]


def _orders(ctx: ServerContext, request: OrdersRequest) -> OrdersResponse:
    known = set(request.known)
    launch: list[LaunchOrder] = []
    kill: list[str] = []
    with ctx.db.read() as session:
        tasks = session.scalars(
            select(Task).where(Task.node.in_(request.nodes), Task.state.in_(ACTIVE_TASK))
        ).all()
        for task in tasks:
            if task.kill_requested:
                kill.append(task.attempt_id)
            elif task.state == State.WAITING.value and task.attempt_id not in known:
                launch.append(_launch_order(ctx, session, task))
    return OrdersResponse(launch=launch, kill=kill)


def _launch_order(ctx: ServerContext, session: Session, task: Task) -> LaunchOrder:
    job = session.get(Job, task.job_id)
    assert job is not None
    spec = spec_of(job)
    peers = session.scalars(
        select(Task).where(Task.job_id == job.id, Task.job_attempt == task.job_attempt)
    ).all()
    environment = JobEnvironment(
        env_job(spec, job.id, job.user, job.virtual_cluster), [placement_of(t) for t in peers]
    )
    env = {**spec.env, **spec.role(task.role).env, **environment.for_task(task.role, task.index)}
    env["SHOAL_TASK_ATTEMPT"] = str(task.attempt)
    env["SHOAL_JOB_ATTEMPT"] = str(task.job_attempt)
    deadline = None
    if spec.max_runtime_s and job.launched_at is not None:
        deadline = max(0.0, job.launched_at + spec.max_runtime_s - ctx.clock())
    return LaunchOrder(
        attempt_id=task.attempt_id,
        job_id=job.id,
        role=task.role,
        index=task.index,
        node=task.node,
        command=spec.role(task.role).command,
        env=env,
        hostfile=environment.hostfile(),
        has_code=job.has_code,
        deadline_s=deadline,
        kill_grace_s=ctx.settings.kill_grace_s,
    )


def placement_of(task: Task) -> TaskPlacement:
    return TaskPlacement(
        role=task.role,
        index=task.index,
        node=task.node,
        address=task.address,
        resources=ResourceVector(task.cpu_millis, task.memory_mib, len(task.gpu_indices)),
        gpu_indices=tuple(task.gpu_indices),
        ports=tuple((label, tuple(ports)) for label, ports in task.ports),
    )


def lose_silent_nodes(ctx: ServerContext) -> bool:
    """Nodes whose agent has been silent too long are lost, with their tasks."""
    now = ctx.clock()
    cutoff = now - ctx.settings.node_timeout_s
    changed = False
    with ctx.db.read() as session:  # the common case, nobody is late, needs no write
        late = session.scalar(
            select(Node.name).where(Node.state == "READY", Node.last_seen < cutoff).limit(1)
        )
    if late is None:
        return False
    with ctx.db.write() as session:
        for node in session.scalars(
            select(Node).where(Node.state == "READY", Node.last_seen < cutoff)
        ):
            node.state = "LOST"
            changed = True
            for task in session.scalars(
                select(Task).where(Task.node == node.name, Task.state.in_(ACTIVE_TASK))
            ):
                on_exit(session, task, ProcessExit(None, lost=True), now)
    return changed
