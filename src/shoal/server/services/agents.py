"""The agent protocol: an agent reports its nodes, running and exited tasks, and is told what to
launch and kill. One idempotent call (``sync``), long-polled, so nothing is lost when either side
restarts: reports are repeated until acknowledged, launches until the agent reports them running.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from shoal.core.envcontract import JobEnvironment
from shoal.core.plan import TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.states import State
from shoal.planning import env_job
from shoal.protocol import (
    DEFAULT_TASK_PIDS,
    DataMount,
    LaunchOrder,
    OrdersRequest,
    OrdersResponse,
    ReportRequest,
    ReportResponse,
    TaskLimits,
)
from shoal.server.context import ServerContext
from shoal.server.services.arrays import env_array
from shoal.server.services.images import image_ref_for
from shoal.server.services.metrics import record_report, record_report_from_memory
from shoal.server.services.quiet_answers import report_shape
from shoal.server.services.reports import (
    QuietReport,
    apply_report,
    heartbeats,
    node_epochs,
    quiet_report,
)
from shoal.server.services.silent_nodes import lose_silent_nodes  # noqa: F401 (re-exported)
from shoal.server.services.snapshot import spec_of
from shoal.server.services.tunnels import proxy_env
from shoal.spec.model import Resources, Runtime, SourceFormat, TaskRoleSpec
from shoal.spec.templating import NATIVE_TOKEN, PAI_TOKEN, secret_values
from shoal.store.models import Job, Node, Task, User

ACTIVE_TASK = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


async def report(ctx: ServerContext, request: ReportRequest) -> ReportResponse:
    """Apply an agent's report: nodes, started and exited attempts (idempotent). A report with
    nothing new is read, not written; its heartbeats, when due, share one group commit with
    other agents' (docs/cluster.md, "Heartbeats"), and are durable before it is answered. The
    same quiet report again is answered from memory while the store has not changed
    (``quiet_answers``)."""
    settings = ctx.settings
    kill = await _answer_quietly(ctx, request)
    if kill is None:
        acked, kill = await run_in_threadpool(apply_report, ctx, request)
    else:
        acked = []
    return ReportResponse(
        acked=acked, kill=kill, lease_s=settings.lease_s, heartbeat_s=settings.heartbeat_s
    )


async def _answer_quietly(ctx: ServerContext, request: ReportRequest) -> list[str] | None:
    """The attempts to kill if the report is quiet and its due heartbeats were written; None:
    it takes the write path."""
    if request.exited:
        await run_in_threadpool(record_report, ctx, request)
        return None
    answers = ctx.quiet_answers
    shape = report_shape(request)
    version = await answers.version()  # before the evaluation: a change during it is seen
    kept = answers.lookup(request, shape, version)
    if kept is None or not record_report_from_memory(ctx, request):
        quiet = await run_in_threadpool(_record_and_read, ctx, request)  # one thread hop
        if quiet is None:
            answers.forget(request.agent_id)
            return None
        kept = answers.keep(request, shape, version, quiet)
    now = ctx.clock()
    due = kept.due(request, now, ctx.settings.heartbeat_write_s)
    if due and not await ctx.commits.run(heartbeats(due, now), wake=False):
        answers.forget(request.agent_id)  # a node was lost meanwhile: coming back is a write
        return None
    kept.written(due, now)
    return list(kept.kill)


def _record_and_read(ctx: ServerContext, request: ReportRequest) -> QuietReport | None:
    record_report(ctx, request)  # the nodes' metrics (docs/metrics.md)
    return quiet_report(ctx, request)


async def orders(ctx: ServerContext, request: OrdersRequest) -> OrdersResponse:
    """Launch and kill orders for the agent's nodes, waiting up to ``wait_s`` for some.

    The store is read in a worker thread; the wait holds none: it parks on the event loop until
    news about one of the agent's nodes (``ctx.wake_agents``) or the end of ``wait_s``. The
    nodes' news versions are taken before the read, so news recorded meanwhile is not missed."""
    seen = ctx.agent_work.versions(request.nodes)
    if ctx.quiet_polls.still_empty(request, seen):  # no news since a read found nothing
        response = OrdersResponse()
    else:
        response = await _read_orders(ctx, request, seen)
    waits = not _has_work(response) and request.wait_s > 0 and not ctx.closing
    # no news by the end of the wait: answered as read (the agent asks again at once, and that
    # poll, with no news since, is answered without a read: ``quiet_polls``)
    if waits and await ctx.agent_work.wait(request.nodes, seen, request.wait_s):
        response = await _read_orders(ctx, request, ctx.agent_work.versions(request.nodes))
    return response


async def _read_orders(
    ctx: ServerContext, request: OrdersRequest, seen: tuple[int, ...]
) -> OrdersResponse:
    """``_orders`` in a worker thread; ``seen``: the nodes' news versions taken before it."""
    response = await run_in_threadpool(_orders, ctx, request)
    ctx.quiet_polls.found(request, seen, _has_work(response))
    return response


def _has_work(response: OrdersResponse) -> bool:
    return bool(response.launch or response.kill or response.exec or response.tunnels)


_ACTIVE_ON_NODES = select(
    Task.id, Task.attempt, Task.state, Task.kill_requested, Task.job_id
).where(Task.node.in_(bindparam("nodes", expanding=True)), Task.state.in_(ACTIVE_TASK))


_JOBS = select(Job).where(Job.id.in_(bindparam("ids", expanding=True)))
_GANGS = select(Task).where(Task.job_id.in_(bindparam("ids", expanding=True)))
_USER_NUMBERS = select(User.name, User.id).where(User.name.in_(bindparam("names", expanding=True)))


def _orders(ctx: ServerContext, request: OrdersRequest) -> OrdersResponse:
    """Plain rows for the unfinished tasks of the agent's nodes; objects only for the launches."""
    known = set(request.known)
    launch: list[LaunchOrder] = []
    with ctx.db.read() as session:
        rows = session.connection().execute(_ACTIVE_ON_NODES, {"nodes": request.nodes}).all()
        kill = [f"{r.id}.{r.attempt}" for r in rows if r.kill_requested]
        new = [
            r
            for r in rows
            if not r.kill_requested
            and r.state == State.WAITING.value
            and f"{r.id}.{r.attempt}" not in known
        ]
        if new:  # the jobs and every task of their attempts, in two queries
            job_ids = sorted({r.job_id for r in new})
            jobs = {j.id: j for j in session.scalars(_JOBS, {"ids": job_ids})}
            parent_ids = sorted({j.array_job_id for j in jobs.values() if j.array_job_id})
            if parent_ids:  # the arrays the elements among them belong to, in one query
                jobs |= {j.id: j for j in session.scalars(_JOBS, {"ids": parent_ids})}
            tasks: dict[int, Task] = {}
            gangs: dict[tuple[str, int], list[Task]] = {}
            for peer in session.scalars(_GANGS, {"ids": job_ids}):
                tasks[peer.id] = peer
                gangs.setdefault((peer.job_id, peer.job_attempt), []).append(peer)
            epochs = node_epochs(session, request.nodes)
            names = sorted({j.user for j in jobs.values()})
            numbers = user_numbers(session, names)
            for row in new:
                task = tasks[row.id]
                peers = sorted(gangs[(task.job_id, task.job_attempt)], key=lambda t: t.id)
                epoch = epochs.get(task.node, 0)
                job = jobs[task.job_id]
                parent = jobs.get(job.array_job_id) if job.array_job_id else None
                order = _launch_order(ctx, job, task, peers, epoch, parent)
                order.owner_number = numbers.get(job.user)
                launch.append(order)
    exec_orders, tunnels = ctx.exec_hub.take(request.nodes), ctx.tunnel_hub.take(request.nodes)
    return OrdersResponse(launch=launch, kill=kill, exec=exec_orders, tunnels=tunnels)


def user_numbers(session: Session, names: list[str]) -> dict[str, int]:
    """Each user's number in the store: what an agent maps to the uid its task runs as."""
    found = session.execute(_USER_NUMBERS, {"names": names})
    return {name: number for name, number in found}  # noqa: C416 - typed rows to a dict


def _launch_order(
    ctx: ServerContext, job: Job, task: Task, peers: list[Task], epoch: int, parent: Job | None
) -> LaunchOrder:
    """``parent``: the array ``job`` is an element of (None for other jobs)."""
    spec = spec_of(job)
    array = env_array(job, parent)
    environment = JobEnvironment(
        env_job(spec, job.id, job.user, job.virtual_cluster, array),
        [placement_of(t) for t in peers],
    )
    env = {**spec.env, **spec.role(task.role).env, **environment.for_task(task.role, task.index)}
    env["SHOAL_TASK_ATTEMPT"] = str(task.attempt)
    env["SHOAL_JOB_ATTEMPT"] = str(task.job_attempt)
    env.update(proxy_env(ctx.proxy_key, job.id, task))  # the task proxy (docs/proxy.md)
    deadline = None
    if spec.max_runtime_s and job.launched_at is not None:
        deadline = max(0.0, job.launched_at + spec.max_runtime_s - ctx.clock())
    command = spec.role(task.role).command
    token = NATIVE_TOKEN if job.source_format == SourceFormat.NATIVE.value else PAI_TOKEN
    return LaunchOrder(
        attempt_id=task.attempt_id,
        job_id=job.id,
        role=task.role,
        index=task.index,
        node=task.node,
        command=command,
        env=env,
        hostfile=environment.hostfile(),
        has_code=job.has_code,
        code_hash=job.code_hash,
        data=_data_mounts(job, spec.data_for(task.role)),
        deadline_s=deadline,
        kill_grace_s=ctx.settings.kill_grace_s,
        secrets=secret_values(command, spec.secrets, token) if spec.secrets else {},
        inherited_env=job.inherited_env,
        workdir=None if job.has_code else job.submit_dir,
        ports={label: list(ports) for label, ports in task.ports},
        epoch=epoch,
        runtime=(spec.runtime or Runtime.PROCESS).value,
        limits=_limits(task, spec.role(task.role).resources),
        image=image_ref_for(job, task.role),
        image_name=spec.role(task.role).image,
        owner=job.user,
        debug_hold_s=_debug_hold(ctx, spec.role(task.role)),
    )


def _debug_hold(ctx: ServerContext, role: TaskRoleSpec) -> float | None:
    """How long a failed task of ``role`` is held (None: it is not; docs/debug-jobs.md)."""
    if not role.debug:
        return None
    return float(role.debug_hold_s) if role.debug_hold_s else ctx.settings.debug_hold_s


def _limits(task: Task, resources: Resources) -> TaskLimits:
    """What the task is held to: what was reserved for it on its node."""
    return TaskLimits(
        cpu_millis=task.cpu_millis,
        memory_mib=task.memory_mib,
        pids=resources.pids or DEFAULT_TASK_PIDS,
        shm_mib=resources.shm_mib,
        gpu_indices=list(task.gpu_indices),
    )


def _data_mounts(job: Job, refs: tuple[str, ...]) -> list[DataMount]:
    """The pinned data sets the task reads (resolved at submission)."""
    pinned = job.data_sets or {}
    return [
        DataMount(ref=ref, sha256=e["sha256"], kind=e["kind"], size=e["size"])
        for ref in refs
        if (e := pinned.get(ref)) is not None
    ]


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


def restart_node_clocks(ctx: ServerContext) -> int:
    """On server start, every READY node counts as just heard from: the server's own down time is
    not held against agents, which get a full node timeout to report again (their tasks run on
    within their lease meanwhile). Returns how many nodes were touched."""
    with ctx.db.write() as session:
        result = session.execute(
            update(Node).where(Node.state == "READY").values(last_seen=ctx.clock())
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]
