"""What a pool of cloud machines should do now: grow for jobs that wait for room, shrink when idle.

Pure, like ``schedule``: the server's autoscaler, the simulator and the tests call
``plan_scaling(snapshot, waiting, pools, instances, now)`` and apply its ``ScalePlan``.

* **Growing.** Only jobs that wait because nothing fits (``CAPACITY_REASONS``, never a quota
  reason) make a pool grow. Each is placed, in queue order, on the cluster as it is plus the
  machines already launching (so a second pass launches nothing new for the same job), then on
  that plus ``k`` new machines of a pool, the cheapest pool first, for the smallest ``k`` the
  pool's ``max_nodes`` allows. Gang-aware: a job gets all the machines it needs at once, or none
  are launched for it (``unservable`` then says which pool's maximum stands in the way).
* **Shrinking.** A joined machine whose node has held no task for the pool's idle timeout is
  drained (no new task lands on it); once drained and still empty it is terminated. Machines a
  waiting job's placement counts on are never taken, nor any below the pool's minimum.
* **Failing to join.** A machine that has not joined within the pool's join timeout is terminated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import ReasonCode, TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    TaskAllocation,
    allocation_for,
)

# Reasons a bigger cluster could cure; every other reason (quota, caps, preemption under way,
# a job ahead holding the room) leaves the pools alone.
CAPACITY_REASONS = frozenset(
    {
        ReasonCode.INSUFFICIENT_GPU,
        ReasonCode.INSUFFICIENT_CPU,
        ReasonCode.INSUFFICIENT_MEMORY,
        ReasonCode.INSUFFICIENT_PORTS,
        ReasonCode.GPU_TYPE_UNAVAILABLE,
        ReasonCode.UNSUPPORTED_BY_NODES,
        ReasonCode.GANG_DOES_NOT_FIT,
        ReasonCode.NO_SCHEDULABLE_NODES,
        ReasonCode.NEVER_FITS,
    }
)
MAX_JOBS_CONSIDERED = 200  # waiting jobs looked at per pass, in queue order
TASK_PORTS = 1000  # a pool machine's agent offers this many task ports


class Phase(StrEnum):
    """Where a pool's machine is in its life (the server's ``cloud_instances.phase``)."""

    LAUNCHING = "launching"  # asked for; its node has not joined yet
    JOINED = "joined"  # its node is registered
    DRAINING = "draining"  # being emptied before it is terminated
    TERMINATING = "terminating"  # terminate asked of the provider


class RemovalCause(StrEnum):
    IDLE = "idle"
    JOIN_TIMEOUT = "join-timeout"
    SCALE_DOWN = "scale-down"  # the pool's target was lowered (`shoal cluster scale`)
    NODE_GONE = "node-gone"  # its node was removed from the cluster (`shoal node remove`)


class Step(StrEnum):
    DRAIN = "drain"
    TERMINATE = "terminate"


@dataclass(frozen=True, slots=True)
class PoolTemplate:
    """What one more machine of a pool would be, and the pool's bounds."""

    name: str
    capacity: ResourceVector
    price_per_hour: float
    min_nodes: int
    max_nodes: int
    idle_timeout_s: float
    join_timeout_s: float
    gpu_type: str | None = None
    target: int | None = None  # set by `shoal cluster scale`: the pool's size, held as its min
    # False: no offer can be tried now (all blocked, none known, or the pool left the cloud
    # file): the pool does not grow, but its machines still shrink as they should
    can_grow: bool = True

    def node(self, name: str) -> NodeState:
        return NodeState(
            name=name,
            address="",
            capacity=self.capacity,
            gpu_indices=tuple(range(self.capacity.gpu)),
            gpu_type=self.gpu_type,
            port_range=(20000, 20000 + TASK_PORTS),
        )

    @property
    def floor(self) -> int:
        return self.min_nodes if self.target is None else self.target


@dataclass(frozen=True, slots=True)
class PoolInstance:
    """One machine of a pool. ``node`` is the name its agent joins as; ``idle_since`` is when its
    node was last seen with no task (None: busy, or not joined)."""

    request_id: str
    pool: str
    node: str
    phase: Phase
    launched_at: float
    idle_since: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleUp:
    pool: str
    count: int
    for_jobs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Removal:
    request_id: str
    pool: str
    node: str
    step: Step
    cause: RemovalCause


@dataclass(frozen=True, slots=True)
class PoolWait:
    """``job_id`` waits for ``nodes`` machines of ``pool`` that are launching (since ``since``)
    or to be launched by this plan (``since`` None)."""

    job_id: str
    pool: str
    nodes: int
    since: float | None


@dataclass(frozen=True, slots=True)
class ScalePlan:
    launches: tuple[ScaleUp, ...] = ()
    removals: tuple[Removal, ...] = ()
    waits: tuple[PoolWait, ...] = ()
    unservable: tuple[tuple[str, str], ...] = ()  # (job id, why no pool can take it)
    idle_since: Mapping[str, float | None] = field(default_factory=dict)  # request id -> mark


@dataclass
class _Growth:
    """The machines a pass counts on: launching ones and those it decides to launch."""

    templates: dict[str, PoolTemplate]
    instances_by_node: dict[str, PoolInstance]
    nodes: list[NodeState]
    pool_of: dict[str, str]  # virtual node name -> pool
    allocations: list[TaskAllocation]
    new: dict[str, int] = field(default_factory=dict)
    new_for: dict[str, list[str]] = field(default_factory=dict)
    needed_nodes: set[str] = field(default_factory=set)
    minted: dict[str, int] = field(default_factory=dict)  # virtual names given, per pool
    # ``nodes`` holding ``allocations``, kept while no node is added: most jobs are tried on
    # what is there first, and building a pool costs O(nodes + allocations)
    _current: NodePool | None = None

    def try_place(self, job: JobRequest, extra: Sequence[NodeState]) -> list[TaskPlacement] | None:
        if extra:
            pool = NodePool([*self.nodes, *extra], self.allocations)
        else:
            if self._current is None:
                self._current = NodePool(self.nodes, self.allocations)
            pool = self._current
        placed = pool.place_job(job, commit=False)
        return None if isinstance(placed, PlacementFailure) else placed

    def hold(self, job: JobRequest, placed: list[TaskPlacement], added: bool) -> None:
        """Count ``placed`` as taken (``added``: it uses nodes just added to ``nodes``)."""
        self.allocations.extend(allocation_for(job, p) for p in placed)
        if added:
            self._current = None
        elif self._current is not None:
            self._current.reserve(placed, job.job_id)


def plan_scaling(
    snapshot: ClusterSnapshot,
    waiting: Mapping[str, ReasonCode],
    pools: Sequence[PoolTemplate],
    instances: Sequence[PoolInstance],
    now: float,
) -> ScalePlan:
    """Decide launches and removals for ``pools``; ``waiting`` maps queued jobs to their reasons."""
    templates = {p.name: p for p in pools}
    live = [i for i in instances if i.pool in templates]
    growth = _start_growth(snapshot, templates, live)
    waits: list[PoolWait] = []
    unservable: list[tuple[str, str]] = []
    considered = [j for j in snapshot.queue if waiting.get(j.job_id) in CAPACITY_REASONS]
    for job in considered[:MAX_JOBS_CONSIDERED]:
        outcome = _grow_for(growth, job, pools, live)
        if isinstance(outcome, str):
            unservable.append((job.job_id, outcome))
        else:
            waits.extend(outcome)
    _grow_to_floor(growth, pools, live)
    removals, marks = _shrink(snapshot, templates, live, growth.needed_nodes, now)
    launches = tuple(
        ScaleUp(name, count, tuple(growth.new_for.get(name, ())))
        for name, count in growth.new.items()
        if count > 0
    )
    return ScalePlan(launches, tuple(removals), tuple(waits), tuple(unservable), marks)


def _start_growth(
    snapshot: ClusterSnapshot, templates: dict[str, PoolTemplate], live: Sequence[PoolInstance]
) -> _Growth:
    registered = {n.name for n in snapshot.nodes}
    nodes = list(snapshot.nodes)
    pool_of: dict[str, str] = {}
    for inst in live:
        if inst.phase is Phase.LAUNCHING and inst.node not in registered:
            nodes.append(templates[inst.pool].node(inst.node))
            pool_of[inst.node] = inst.pool
    return _Growth(templates, {i.node: i for i in live}, nodes, pool_of, list(snapshot.allocations))


def _pool_size(live: Sequence[PoolInstance], pool: str) -> int:
    return sum(1 for i in live if i.pool == pool and i.phase is not Phase.TERMINATING)


def _grow_for(
    growth: _Growth, job: JobRequest, pools: Sequence[PoolTemplate], live: Sequence[PoolInstance]
) -> list[PoolWait] | str:
    """Place ``job`` on what is there or launching, else on the fewest new machines of the
    cheapest pool that can hold it; the waits it then has, or why no pool can take it."""
    placed = growth.try_place(job, ())
    if placed is not None:
        return _commit(growth, job, placed, (), None)
    refusals = []
    for template in sorted(pools, key=lambda p: (p.price_per_hour, p.name)):
        if not template.can_grow:
            continue
        planned = growth.new.get(template.name, 0)
        room = template.max_nodes - _pool_size(live, template.name) - planned
        for count in range(1, room + 1):
            first = growth.minted.get(template.name, 0)
            extra = [template.node(f"+{template.name}-{first + k}") for k in range(count)]
            if not _enough(growth, job, extra):
                continue
            placed = growth.try_place(job, extra)
            if placed is not None:
                return _commit(growth, job, placed, extra, template.name)
        refusals.append(f"pool {template.name} ({room} more machines allowed)")
    if not refusals:
        return "no pool can grow now: none has an offer left to try"
    return "no pool can hold it: " + "; ".join(refusals)


def _enough(growth: _Growth, job: JobRequest, extra: Sequence[NodeState]) -> bool:
    """A quick bound: ``extra`` adds at least what ``job`` needs beyond the largest free node
    set could ever give (skips counts that cannot work without building a pool)."""
    added = ResourceVector()
    for node in extra:
        added = added + node.capacity
    total = job.total
    return (
        added.gpu >= min(total.gpu, max(r.per_instance.gpu for r in job.roles))
        and added.cpu_millis >= max(r.per_instance.cpu_millis for r in job.roles)
        and added.memory_mib >= max(r.per_instance.memory_mib for r in job.roles)
    )


def _commit(
    growth: _Growth,
    job: JobRequest,
    placed: list[TaskPlacement],
    extra: Sequence[NodeState],
    new_pool: str | None,
) -> list[PoolWait]:
    used = {p.node for p in placed}
    if new_pool is not None:
        # names are never given twice, even when the placement left some of ``extra`` unused
        growth.minted[new_pool] = growth.minted.get(new_pool, 0) + len(extra)
        kept = [n for n in extra if n.name in used]
        growth.nodes.extend(kept)
        for node in kept:
            growth.pool_of[node.name] = new_pool
        growth.new[new_pool] = growth.new.get(new_pool, 0) + len(kept)
        growth.new_for.setdefault(new_pool, []).append(job.job_id)
    growth.hold(job, placed, new_pool is not None)
    growth.needed_nodes |= used
    waits: dict[str, list[float | None]] = {}
    for name in used:
        pool = growth.pool_of.get(name)
        if pool is None:
            continue
        instance = growth.instances_by_node.get(name)
        waits.setdefault(pool, []).append(None if instance is None else instance.launched_at)
    return [
        PoolWait(
            job.job_id,
            pool,
            len(marks),
            None if None in marks else min(m for m in marks if m is not None),
        )
        for pool, marks in sorted(waits.items())
    ]


def _grow_to_floor(
    growth: _Growth, pools: Sequence[PoolTemplate], live: Sequence[PoolInstance]
) -> None:
    for template in pools:
        if not template.can_grow:
            continue
        size = _pool_size(live, template.name) - _draining(live, template.name)
        missing = template.floor - size - growth.new.get(template.name, 0)
        if missing > 0:
            growth.new[template.name] = growth.new.get(template.name, 0) + missing


def _draining(live: Sequence[PoolInstance], pool: str) -> int:
    return sum(1 for i in live if i.pool == pool and i.phase is Phase.DRAINING)


def _shrink(
    snapshot: ClusterSnapshot,
    templates: dict[str, PoolTemplate],
    live: Sequence[PoolInstance],
    needed: set[str],
    now: float,
) -> tuple[list[Removal], dict[str, float | None]]:
    busy = {a.node for a in snapshot.allocations}
    registered = {n.name for n in snapshot.nodes}
    removals: list[Removal] = []
    marks: dict[str, float | None] = {}
    keep = {name: _pool_size(live, name) - _draining(live, name) for name in templates}
    idle_first = sorted(live, key=lambda i: (i.idle_since is None, i.idle_since or 0.0))
    for inst in idle_first:
        template = templates[inst.pool]
        idle = inst.node in registered and inst.node not in busy and inst.node not in needed
        mark = (inst.idle_since if inst.idle_since is not None else now) if idle else None
        if mark != inst.idle_since:
            marks[inst.request_id] = mark
        if inst.phase is Phase.JOINED and inst.node not in registered:
            step = Removal(
                inst.request_id, inst.pool, inst.node, Step.TERMINATE, RemovalCause.NODE_GONE
            )
            removals.append(step)
            continue
        removal = _removal_of(inst, template, idle, mark, keep, now, busy)
        if removal is not None:
            removals.append(removal)
    return removals, marks


def _removal_of(
    inst: PoolInstance,
    template: PoolTemplate,
    idle: bool,
    idle_since: float | None,
    keep: dict[str, int],
    now: float,
    busy: set[str],
) -> Removal | None:
    def removal(step: Step, cause: RemovalCause) -> Removal:
        return Removal(inst.request_id, inst.pool, inst.node, step, cause)

    if inst.phase is Phase.LAUNCHING:
        if now - inst.launched_at >= template.join_timeout_s:
            return removal(Step.TERMINATE, RemovalCause.JOIN_TIMEOUT)
        return None
    if inst.phase is Phase.DRAINING:
        if inst.node not in busy:
            return removal(Step.TERMINATE, RemovalCause.IDLE)
        return None
    if inst.phase is not Phase.JOINED or not idle or keep[inst.pool] <= template.floor:
        return None
    over_target = template.target is not None and keep[inst.pool] > template.target
    timed_out = idle_since is not None and now - idle_since >= template.idle_timeout_s
    if not (over_target or timed_out):
        return None
    keep[inst.pool] -= 1
    return removal(Step.DRAIN, RemovalCause.SCALE_DOWN if over_target else RemovalCause.IDLE)
