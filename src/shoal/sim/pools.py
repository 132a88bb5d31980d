"""Scaling pools in the simulator: machines launched and removed by ``core.autoscale``.

The engine calls ``Fleet.plan`` (which is ``plan_scaling``, the function the server's autoscaler
applies) and ``Fleet.apply`` in virtual time: a launched machine becomes a node ``boot_delay_s``
later (the engine schedules that as an event), a DRAIN step makes its node unschedulable, a
TERMINATE step removes it. Node-seconds (and so cost) accrue per pool from launch until
termination, as a cloud bills them; machines still up when the replay ends are counted until then.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from shoal.core.autoscale import (
    Phase,
    PoolInstance,
    PoolTemplate,
    ScalePlan,
    Step,
    plan_scaling,
)
from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import ReasonCode
from shoal.core.snapshot import ClusterSnapshot, JobRequest, NodeState
from shoal.sim.invariants import InvariantViolation


@dataclass(frozen=True, slots=True)
class SimPool:
    """A pool of a cluster file: the autoscaler's template plus how long a machine boots."""

    template: PoolTemplate
    boot_delay_s: float

    @property
    def name(self) -> str:
        return self.template.name

    def with_idle_timeout(self, seconds: float) -> SimPool:
        return replace(self, template=replace(self.template, idle_timeout_s=seconds))

    def fixed_nodes(self) -> tuple[NodeState, ...]:
        """The pool at its maximum as always-on nodes (the fixed-size cluster it is compared to)."""
        width = len(str(self.template.max_nodes))
        return tuple(
            self.template.node(f"{self.name}-{i:0{width}d}") for i in range(self.template.max_nodes)
        )


@dataclass(slots=True)
class PoolUsage:
    """What one pool cost during a replay."""

    name: str
    price_per_hour: float
    gpus_per_node: int
    max_nodes: int
    node_seconds: float = 0.0
    launches: int = 0
    terminations: int = 0
    peak_nodes: int = 0
    idle_timeout_s: float | None = None  # None: always on (the fixed-size comparison)

    @property
    def node_hours(self) -> float:
        return self.node_seconds / 3600

    @property
    def cost(self) -> float:
        return self.node_hours * self.price_per_hour


def always_on_usage(pools: Iterable[SimPool], seconds: float) -> tuple[PoolUsage, ...]:
    """Pools run as fixed nodes: every machine of the maximum billed for ``seconds``."""
    return tuple(
        PoolUsage(
            p.name,
            p.template.price_per_hour,
            p.template.capacity.gpu,
            p.template.max_nodes,
            node_seconds=p.template.max_nodes * seconds,
            launches=p.template.max_nodes,
            peak_nodes=p.template.max_nodes,
        )
        for p in pools
    )


@dataclass(slots=True)
class FleetChange:
    """What a ScalePlan did that the engine must follow: boots to schedule, nodes removed."""

    boots: list[tuple[float, str]] = field(default_factory=list)  # (joins at, request id)
    removed: list[str] = field(default_factory=list)  # node names no longer registered
    nodes_changed: bool = False


class Fleet:
    """The machines of every scaling pool, and what they cost."""

    def __init__(self, pools: Sequence[SimPool], fixed_nodes: Sequence[NodeState]) -> None:
        self.pools = {p.name: p for p in pools}
        self.templates = tuple(p.template for p in pools)
        self.instances: dict[str, PoolInstance] = {}  # by request id
        self.nodes: dict[str, NodeState] = {}  # registered pool nodes (joined or draining)
        self.usage = {
            p.name: PoolUsage(
                p.name,
                p.template.price_per_hour,
                p.template.capacity.gpu,
                p.template.max_nodes,
                idle_timeout_s=p.template.idle_timeout_s,
            )
            for p in pools
        }
        self._launched = 0
        self._largest = (*fixed_nodes, *(n for p in pools for n in p.fixed_nodes()))
        self._fits: dict[tuple[object, ...], bool] = {}

    def plan(
        self, snapshot: ClusterSnapshot, waiting: Mapping[str, ReasonCode], now: float
    ) -> ScalePlan:
        return plan_scaling(snapshot, waiting, self.templates, tuple(self.instances.values()), now)

    def apply(self, plan: ScalePlan, now: float, busy: set[str]) -> FleetChange:
        """Apply ``plan`` at ``now``; ``busy`` are the nodes holding a task (never terminated)."""
        change = FleetChange()
        for request_id, mark in plan.idle_since.items():
            instance = self.instances.get(request_id)
            if instance is not None:
                self.instances[request_id] = replace(instance, idle_since=mark)
        for launch in plan.launches:
            pool = self.pools[launch.pool]
            for _ in range(launch.count):
                request_id = f"{launch.pool}-m{self._launched:05d}"
                self._launched += 1
                self.instances[request_id] = PoolInstance(
                    request_id, launch.pool, request_id, Phase.LAUNCHING, now
                )
                self.usage[launch.pool].launches += 1
                change.boots.append((now + pool.boot_delay_s, request_id))
        for removal in plan.removals:
            instance = self.instances.get(removal.request_id)
            if instance is None:
                continue
            if removal.step is Step.DRAIN:
                self._drain(instance, change)
            else:
                self._terminate(instance, now, busy, change)
        self._count_peaks()
        return change

    def _drain(self, instance: PoolInstance, change: FleetChange) -> None:
        self.instances[instance.request_id] = replace(instance, phase=Phase.DRAINING)
        node = self.nodes.get(instance.node)
        if node is not None:
            self.nodes[instance.node] = replace(node, schedulable=False)
            change.nodes_changed = True

    def _terminate(
        self, instance: PoolInstance, now: float, busy: set[str], change: FleetChange
    ) -> None:
        if instance.node in busy:
            raise InvariantViolation(
                f"t={now}: the autoscaler terminated {instance.node}, which holds a task"
            )
        del self.instances[instance.request_id]
        usage = self.usage[instance.pool]
        usage.node_seconds += now - instance.launched_at
        usage.terminations += 1
        if self.nodes.pop(instance.node, None) is not None:
            change.removed.append(instance.node)
            change.nodes_changed = True

    def _count_peaks(self) -> None:
        sizes: dict[str, int] = {}
        for instance in self.instances.values():
            sizes[instance.pool] = sizes.get(instance.pool, 0) + 1
        for name, size in sizes.items():
            usage = self.usage[name]
            usage.peak_nodes = max(usage.peak_nodes, size)

    def join(self, request_id: str) -> NodeState | None:
        """The machine finished booting: its node registers (None: it was terminated before)."""
        instance = self.instances.get(request_id)
        if instance is None or instance.phase is not Phase.LAUNCHING:
            return None
        self.instances[request_id] = replace(instance, phase=Phase.JOINED)
        node = self.pools[instance.pool].template.node(instance.node)
        self.nodes[instance.node] = node
        return node

    def wakeup(self, now: float) -> float | None:
        """The next instant after ``now`` at which the clock alone (no job event) would make a
        pass do something: an idle timeout or a join timeout running out, a drained node to
        terminate."""
        times = []
        for instance in self.instances.values():
            template = self.pools[instance.pool].template
            if instance.phase is Phase.DRAINING:
                times.append(now)  # terminated at the next pass
            elif instance.phase is Phase.LAUNCHING:
                times.append(instance.launched_at + template.join_timeout_s)
            elif instance.idle_since is not None:
                times.append(instance.idle_since + template.idle_timeout_s)
        later = [t for t in times if t >= now]
        return min(later) if later else None

    def close(self, now: float) -> tuple[PoolUsage, ...]:
        """The replay ended at ``now``: machines still up are billed until then."""
        for instance in self.instances.values():
            self.usage[instance.pool].node_seconds += max(now - instance.launched_at, 0.0)
        return tuple(self.usage.values())

    def could_ever_fit(self, job: JobRequest) -> bool:
        """Whether ``job`` fits the cluster with every pool at its maximum and every node idle
        (if not, no scaling can help it, and it is as infeasible as on a fixed cluster)."""
        key = tuple((r.instances, r.per_instance, r.gpu_type, r.ports) for r in job.roles)
        if key not in self._fits:
            placed = NodePool(self._largest).place_job(job, commit=False)
            self._fits[key] = not isinstance(placed, PlacementFailure)
        return self._fits[key]


def pass_at(at: float, interval_s: float, after: float | None = None) -> float:
    """The first autoscaler pass at or after ``at`` (passes run every ``interval_s``), and
    strictly after ``after`` if given (a pass never asks for another at its own instant)."""
    when = math.ceil(at / interval_s) * interval_s
    if after is not None and when <= after:
        when = math.floor(after / interval_s) * interval_s + interval_s
    return when
