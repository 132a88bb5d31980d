"""An agent's report applied to the store: its nodes, started and exited attempts, and the
started tasks it no longer mentions (lost with an agent restart). Idempotent: exits are repeated
until acknowledged.

Fencing: a report about an attempt launched under an older epoch of its node (the node went
NOT_READY since, so the attempt was declared lost) changes nothing: a running one is answered with
a kill, an exit is acknowledged and dropped. The attempt number guards the same way within an
epoch: only the task's current attempt is ever changed by a report.

A report costs a fixed handful of queries whatever the number of tasks: one plain query reads
the state of every task the report names (and of the started tasks on its nodes); only the tasks
that change are loaded as objects. A report that changes nothing worth a write needs no
transaction at all (every commit costs an fsync, and reports come often)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session

from shoal.core.lifecycle import ProcessExit
from shoal.core.nodestates import Liveness, NodeEvent
from shoal.core.states import State
from shoal.protocol import AgentNode, ReportRequest, RunningReport
from shoal.server.context import ServerContext
from shoal.server.notify import noted_news
from shoal.server.services.debug_holds import hold_ended, newly_held, note_hold
from shoal.server.services.events import record
from shoal.server.services.lifecycle import on_exit, on_started
from shoal.server.services.node_life import change_node, note_drained, record_node_event
from shoal.server.services.port_clash import mark_port_clash
from shoal.server.services.preemption_notices import is_new, note_preemption
from shoal.server.services.silent_nodes import forget_left_nodes
from shoal.store.models import Job, Node, SchedChange, Task

ACTIVE_TASK = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)

# The tasks a report names, and the started unfinished tasks of its nodes.
_NAMED = select(Task.id, Task.attempt, Task.state, Task.launch_acked, Task.node, Task.usage).where(
    or_(
        Task.id.in_(bindparam("ids", expanding=True)),
        and_(
            Task.node.in_(bindparam("nodes", expanding=True)),
            Task.state.in_(ACTIVE_TASK),
            Task.launch_acked.is_(True),
        ),
    )
)
_AGENT_NODES = select(Node.name).where(Node.agent_id == bindparam("agent"))
_AGENT_READY_NODES = select(Node.name).where(
    Node.agent_id == bindparam("agent"), Node.state == Liveness.READY.value
)
_NODES = select(Node).where(Node.name.in_(bindparam("nodes", expanding=True)))
_EPOCHS = select(Node.name, Node.epoch).where(Node.name.in_(bindparam("nodes", expanding=True)))
_TASKS = select(Task).where(Task.id.in_(bindparam("ids", expanding=True)))
_JOBS = select(Job).where(Job.id.in_(bindparam("ids", expanding=True)))
_NODE_TABLE: Table = Node.__table__  # type: ignore[assignment]
_HEARTBEAT = (  # a plain (not ORM) update: many rows in one executemany
    update(_NODE_TABLE)
    .where(_NODE_TABLE.c.name == bindparam("b_name"), _NODE_TABLE.c.state == Liveness.READY.value)
    .values(last_seen=bindparam("b_now"), usage=bindparam("b_usage"))
)


def task_by_attempt(session: Session, attempt_id: str) -> Task | None:
    task_id, _, attempt = attempt_id.partition(".")
    if not task_id.isdigit() or not attempt.isdigit():
        return None
    task = session.get(Task, int(task_id))
    if task is None or task.attempt != int(attempt):
        return None
    return task


def _task_ids(request: ReportRequest) -> list[int]:
    named = [r.attempt_id for r in request.running] + [r.attempt_id for r in request.exited]
    return [int(a.partition(".")[0]) for a in named if a.partition(".")[0].isdigit()]


def _named(session: Session, request: ReportRequest, answered: set[str]) -> dict[str, Any]:
    """The store's view of every attempt the report names or should name (on the ``answered``
    nodes), by attempt id."""
    rows = session.connection().execute(
        _NAMED, {"ids": _task_ids(request), "nodes": sorted(answered)}
    )
    return {f"{r.id}.{r.attempt}": r for r in rows}


def answered_for(session: Session, request: ReportRequest) -> set[str]:
    """The nodes whose started tasks the report must name. A Kubernetes agent's report covers
    every node it ever reported, listed now or not: its Pods, not its nodes, say what runs, so a
    task whose Node was removed (and its Pods with it) while the agent was away is one it no
    longer names."""
    nodes = {n.name for n in request.nodes}
    if request.fencing == "confirmed":
        nodes |= set(session.scalars(_AGENT_NODES, {"agent": request.agent_id}))
    return nodes


NOT_LISTED = (
    "it is no longer one of the cluster's Nodes (removed, or no longer matched by the agent's "
    "--node-selector); `shoal node remove` forgets it"
)


def left_the_cluster(session: Session, request: ReportRequest) -> list[Node]:
    """READY nodes of a Kubernetes agent that its report no longer lists: their Nodes are gone
    from what it watches, so nothing more is placed there (their tasks end as their Pods do)."""
    if request.fencing != "confirmed":
        return []
    listed = {n.name for n in request.nodes}
    ready = session.scalars(_AGENT_READY_NODES, {"agent": request.agent_id})
    gone = [name for name in ready if name not in listed]
    return list(session.scalars(_NODES, {"nodes": gone})) if gone else []


def vanished(named: dict[str, Any], request: ReportRequest, nodes: set[str]) -> list[Any]:
    """Started tasks on the agent's nodes (``answered_for``) that its report neither runs nor
    reports as exited."""
    reported = {r.attempt_id for r in request.running} | {r.attempt_id for r in request.exited}
    return [
        row
        for attempt_id, row in named.items()
        if row.node in nodes
        and row.state in ACTIVE_TASK
        and row.launch_acked
        and attempt_id not in reported
    ]


def node_epochs(session: Session, names: list[str]) -> dict[str, int]:
    rows = session.connection().execute(_EPOCHS, {"nodes": sorted(set(names))})
    return {row.name: row.epoch for row in rows}


def is_stale(row: Any, epoch: int, epochs: dict[str, int]) -> bool:
    """Must the attempt (its task's row, None if not its current attempt) not run? It must not
    when it is not the task's current attempt, its task has ended, or it was launched under an
    older epoch of its node (the node went NOT_READY since: the attempt was declared lost)."""
    if row is None or State(row.state).is_terminal:
        return True
    return epoch < epochs.get(row.node, 0)


def _epochs_for(session: Session, request: ReportRequest, named: dict[str, Any]) -> dict[str, int]:
    names = [n.name for n in request.nodes] + [row.node for row in named.values()]
    return node_epochs(session, names)


def _stale_exit(task: Task, epoch: int | None, epochs: dict[str, int]) -> bool:
    """Whether an exit report must not change ``task``: one launched under an older epoch of its
    node. An attempt never launched (``epoch`` None: killed or refused before the agent took its
    order) ends the current attempt if that was never reported running, whatever the epoch."""
    if epoch is None:
        return bool(task.launch_acked)
    return epoch < epochs.get(task.node, 0)


@dataclass
class QuietReport:
    """A report that changes nothing but heartbeats: the attempts to kill, and each node's
    ``last_seen`` as read (whose heartbeat is due: ``quiet_answers.KeptAnswer.due``)."""

    stale: list[str]
    seen: dict[str, float]


def heartbeats(due: list[tuple[str, dict[str, Any]]], now: float) -> Callable[[Session], bool]:
    """The write of a quiet report's heartbeats, for a group commit (one transaction for many
    agents' reports): True if every node was still READY (else the report takes the full path:
    the node was lost meanwhile, and coming back is a change)."""

    def write(session: Session) -> bool:
        rows = [{"b_name": name, "b_now": now, "b_usage": usage} for name, usage in due]
        result = session.connection().execute(_HEARTBEAT, rows)
        return bool(result.rowcount == len(rows))

    return write


def apply_report(ctx: ServerContext, request: ReportRequest) -> tuple[list[str], list[str]]:
    """The write path of a report that is not quiet (``quiet_report``): returns the exits
    acknowledged and the attempts the agent should kill."""
    now = ctx.clock()
    acked: list[str] = []
    stale: list[str] = []
    with ctx.db.write() as session:
        answered = answered_for(session, request)
        named = _named(session, request, answered)
        epochs = _epochs_for(session, request, named)
        lost = vanished(named, request, answered)
        loaded = _load_changing(ctx, session, request, named, lost, epochs)
        changed = False
        ended: set[str] = set()  # nodes where a task ended
        refresh_s = ctx.settings.heartbeat_write_s / 2
        # every reported node in one query: each _upsert_node's get is then found in the session
        # (a Kubernetes agent reports a thousand nodes; one query each was most of a report)
        held = session.scalars(_NODES, {"nodes": [n.name for n in request.nodes]}).all()
        for node in request.nodes:
            changed |= _upsert_node(session, request, node, now, refresh_s)
            if node.preemption is not None:  # its cloud takes the machine back (docs/cloud.md)
                changed |= note_preemption(ctx, session, node.name, node.preemption, now)
        del held  # (held until here: the session keeps only weak references)
        for gone in left_the_cluster(session, request):
            change_node(session, gone, NodeEvent.PLATFORM_NOT_READY, now, why=NOT_LISTED)
            changed = True
        for running in request.running:
            row = named.get(running.attempt_id)
            if row is None or is_stale(row, running.epoch, epochs):
                stale.append(running.attempt_id)  # not ours to run (any more): kill it
            elif row.id in loaded.tasks:
                _note_running(ctx, session, loaded.tasks[row.id], running, now)
        for report in request.exited:
            task = task_by_attempt(session, report.attempt_id)
            if task is not None and _stale_exit(task, report.epoch, epochs):
                task = None  # an attempt of an older epoch: it was declared lost already
            if task is not None:
                result = ProcessExit(
                    report.exit_code,
                    report.signal,
                    report.stop_requested,
                    report.timed_out,
                    report.launch_error,
                    agent_shutdown=report.agent_shutdown,
                    fenced=report.fenced,
                    oom_killed=report.oom_killed,
                    oom_kills=report.oom_kills,
                    lost=report.lost,
                    lost_reason=report.lost_reason,
                    message=report.message,
                    memory_limit_mib=_whole(_number(report.usage.get("memoryLimitMiB"))),
                    peak_memory_mib=_number(report.usage.get("peakMemoryMiB")),
                )
                if task.started_at is None and report.started_at is not None:
                    task.started_at = report.started_at
                if report.busy_port is not None:  # placed again on free ports, if it may
                    mark_port_clash(session, task, report.busy_port, report.finished_at)
                hold_ended(ctx, session, task, report.attempt_id, report.finished_at)
                on_exit(session, task, result, report.finished_at, report.usage)
                ended.add(task.node)
                changed = True
            ctx.seen_attempts.discard(report.attempt_id)
            acked.append(report.attempt_id)
        for row in lost:  # the agent once ran them but no longer does (e.g. it restarted)
            on_exit(session, loaded.tasks[row.id], ProcessExit(None, lost=True), now)
            ended.add(row.node)
            changed = True
        changed = _after_exits(session, request, ended, now) or changed
        del loaded
    if changed:
        ctx.wake_scheduler()
        ctx.wake_agents(noted_news(session))  # exits may have asked for kills or retries
    return acked, stale


def _after_exits(session: Session, request: ReportRequest, ended: set[str], now: float) -> bool:
    """Nodes whose drain is done are drained; a Kubernetes agent's nodes gone from the cluster
    with nothing left on them are forgotten (True if any was)."""
    note_drained(session, ended, now)
    if request.fencing != "confirmed":
        return False
    listed = [n.name for n in request.nodes]
    return forget_left_nodes(session, request.agent_id, listed, now)


@dataclass
class _Loaded:
    """Rows loaded as objects. The session's identity map holds objects weakly: keeping this
    alive keeps them there, so ``session.get`` by id costs no query."""

    tasks: dict[int, Task] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)


def _load_changing(
    ctx: ServerContext,
    session: Session,
    request: ReportRequest,
    named: dict[str, Any],
    lost: list[Any],
    epochs: dict[str, int],
) -> _Loaded:
    """Load, in two queries, the tasks this report changes and their jobs."""
    ids = {row.id for row in lost}
    for running in request.running:
        row = named.get(running.attempt_id)
        if row is None or is_stale(row, running.epoch, epochs):
            continue
        fresh = running.attempt_id not in ctx.seen_attempts or not row.launch_acked
        changing = row.usage != running.usage or newly_held(ctx, running)
        if fresh or row.state == State.WAITING.value or changing:
            ids.add(row.id)
    ids.update(named[e.attempt_id].id for e in request.exited if e.attempt_id in named)
    if not ids:
        return _Loaded()
    tasks = {t.id: t for t in session.scalars(_TASKS, {"ids": sorted(ids)})}
    job_ids = sorted({t.job_id for t in tasks.values()})
    return _Loaded(tasks, list(session.scalars(_JOBS, {"ids": job_ids})))


def quiet_report(ctx: ServerContext, request: ReportRequest) -> QuietReport | None:
    """If the report changes nothing but heartbeats (written every few seconds, not on every
    report), what to answer; else None (``apply_report``)."""
    if request.exited:
        return None
    if any(is_new(ctx, n.name, n.preemption) for n in request.nodes):
        return None
    with ctx.db.read() as session:
        if left_the_cluster(session, request):
            return None
        nodes = {
            n.name: n for n in session.scalars(_NODES, {"nodes": [n.name for n in request.nodes]})
        }
        for report in request.nodes:
            node = nodes.get(report.name)
            if node is None:
                return None
            if (node.state == Liveness.READY.value) != report.ready:
                return None
            if node.agent_version != request.agent_version or node.fencing != request.fencing:
                return None
            if (node.platform_hold, node.task_address) != (
                report.platform_hold,
                report.task_address,
            ):
                return None
            if (node.cpu_millis, node.memory_mib, list(node.gpu_indices), node.busy_ports) != (
                report.cpu_millis,
                report.memory_mib,
                list(report.gpu_indices),
                report.busy_ports,
            ):
                return None
            if _said_anew(report.labels, node.labels) or _said_anew(
                report.unsupported, node.unsupported
            ):
                return None
        answered = answered_for(session, request)
        named = _named(session, request, answered)
        epochs = {name: node.epoch for name, node in nodes.items()}
        others = [row.node for row in named.values() if row.node not in epochs]
        if others:
            epochs.update(node_epochs(session, others))
    stale: list[str] = []
    for running in request.running:
        row = named.get(running.attempt_id)
        if row is None or is_stale(row, running.epoch, epochs):
            stale.append(running.attempt_id)
        elif not row.launch_acked or running.attempt_id not in ctx.seen_attempts:
            return None
        elif newly_held(ctx, running):
            return None  # a hold to note
    if vanished(named, request, answered):
        return None  # the write path ends them
    return QuietReport(stale, {name: node.last_seen for name, node in nodes.items()})


def _note_running(
    ctx: ServerContext, session: Session, task: Task, running: RunningReport, now: float
) -> None:
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
    note_hold(ctx, session, task, running, now)
    if task.usage != running.usage:  # an unchanged value is not written again
        task.usage = dict(running.usage)


def _upsert_node(
    session: Session, request: ReportRequest, report: AgentNode, now: float, refresh_s: float
) -> bool:
    """Register or update the node; its heartbeat (``last_seen``, usage) is written only when it
    is older than ``refresh_s``, not on every report. A node the platform calls not ready
    (``report.ready`` False) is NOT_READY, its tasks kept: the agent says when they end."""
    agent_id, agent_version = request.agent_id, request.agent_version
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
                busy_ports=list(report.busy_ports),
                schedulable=True,
                state=Liveness.READY.value if report.ready else Liveness.NOT_READY.value,
                last_seen=now,
                registered_at=now,
                usage=dict(report.usage),
                agent_version=agent_version,
                labels=dict(report.labels or {}),
                unsupported=dict(report.unsupported or {}),
                fencing=request.fencing,
                platform_hold=report.platform_hold,
                task_address=report.task_address,
            )
        )
        record_node_event(session, report.name, now, "registered", "joined: its agent reports")
        return True
    came_back = node.state != Liveness.READY.value and report.ready
    if came_back:
        change_node(session, node, NodeEvent.CAME_BACK, now)
    went = node.state == Liveness.READY.value and not report.ready
    if went:
        why = "its platform says it is not ready; its tasks end when the platform confirms they did"
        change_node(session, node, NodeEvent.PLATFORM_NOT_READY, now, why=why)
    if node.fencing != request.fencing:
        node.fencing = request.fencing
    if node.task_address != report.task_address:
        node.task_address = report.task_address
    if node.platform_hold != report.platform_hold:
        _note_platform_hold(session, node, report.platform_hold, now)
    if node.agent_version != agent_version:
        node.agent_version = agent_version
    node.agent_id, node.address = agent_id, report.address
    node.cpu_millis, node.memory_mib = report.cpu_millis, report.memory_mib
    node.gpu_indices, node.gpu_type = list(report.gpu_indices), report.gpu_type
    node.port_low, node.port_high = report.port_low, report.port_high
    if list(node.busy_ports or ()) != report.busy_ports:
        node.busy_ports = list(report.busy_ports)
    if report.labels is not None and dict(node.labels or {}) != report.labels:
        node.labels = dict(report.labels)
    if report.unsupported is not None and dict(node.unsupported or {}) != report.unsupported:
        node.unsupported = dict(report.unsupported)
        # the scheduler places by it (a container task only where containers run); the nodes
        # trigger of the change feed does not watch this column, so say it here
        session.add(SchedChange(kind="node", key=node.name))
    if came_back or went or node.last_seen < now - refresh_s:
        node.last_seen, node.usage = now, dict(report.usage)
    return came_back or went


def _note_platform_hold(session: Session, node: Node, hold: str | None, now: float) -> None:
    """The platform started or stopped keeping new tasks off the node (a Kubernetes cordon)."""
    node.platform_hold = hold
    if hold is None:
        record_node_event(
            session, node.name, now, "platform_released", "its platform takes new tasks again"
        )
    else:
        record_node_event(session, node.name, now, "platform_hold", f"no new tasks: {hold}")


def _number(value: object) -> float | None:
    """A number an agent reported in a task's usage, or None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _said_anew(reported: dict[str, str] | None, stored: dict[str, Any] | None) -> bool:
    """The agent says something (labels, what the node cannot do) other than what is stored."""
    return reported is not None and reported != dict(stored or {})
