"""Gang placement over a mutable, per-cycle pool of free node resources.

The pool is built from a snapshot, changed only through ``place_job`` (which places every task of a
job or, on the first task that does not fit, undoes its own changes), and thrown away after the
cycle. Placement is best fit on GPUs: a task goes to the node with the fewest free GPUs that still
fit it, so whole 8-GPU nodes stay whole for 8-GPU tasks; CPU-only tasks go to nodes with no free
GPUs first. Ties break by node name, which makes every decision deterministic. A node that lacks
what a role needs (its GPU type; the container runtime, reported unsupported) is never chosen.

A pool starts from a free-resource state shared with the other pools over the same nodes
(core/poolstate.py), so building one costs O(nodes), not O(allocations); and a trial placement
(``commit=False``) on a pool that still equals its state is remembered there per job shape.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shoal.core.plan import PendingReason, TaskPlacement
from shoal.core.poolstate import Layout, Layouts, PoolState, count_ports, layout_for
from shoal.core.snapshot import JobRequest, NodeState, RoleRequest, TaskAllocation


@dataclass(frozen=True, slots=True)
class PlacementFailure:
    """The first task of a job that did not fit, and how many of the job's tasks did fit."""

    role: RoleRequest
    index: int
    placed: int


@dataclass(slots=True)
class _Undo:
    node: int
    cpu: int
    memory: int
    gpus: list[int]
    ports: list[int]
    cursor: int


class NodePool:
    """Free cpu, memory, GPU indices and ports of every node, indexed by node position."""

    def __init__(
        self,
        nodes: Sequence[NodeState],
        allocations: Iterable[TaskAllocation] = (),
        *,
        include_unschedulable: bool = False,
        prefer: dict[str, int] | None = None,
        layouts: Layouts | None = None,
    ) -> None:
        # ``prefer``: a rank per node name that wins ties before the name does (lower first);
        # ``layouts``: the caller's kept free-resource states (a SchedulerCache's), if any
        layout = layout_for(nodes, include_unschedulable, prefer, layouts)
        self._start(layout, layout.state_for(allocations))

    @classmethod
    def on_state(cls, layout: Layout, state: PoolState) -> NodePool:
        """A pool over ``layout`` starting from ``state`` (e.g. one made by ``Layout.derive``)."""
        pool = cls.__new__(cls)
        pool._start(layout, state)
        return pool

    def _start(self, layout: Layout, state: PoolState) -> None:
        self.nodes = layout.nodes
        self._index = layout.index
        self.free_cpu = state.free_cpu.copy()
        self.free_memory = state.free_memory.copy()
        self.free_gpus = state.free_gpus.copy()  # a node's list is replaced, never changed
        self.used_ports = state.used_ports.copy()  # a node's set is copied before it changes
        self._own_ports = [False] * len(self.nodes)
        self.cursor = layout.port_low.copy()
        self.is_active = layout.is_active
        self.active = layout.active
        self.max_gpus = layout.max_gpus
        self.buckets = [bucket.copy() for bucket in state.buckets]
        self._journal: list[_Undo] = []
        self.reserved_by: list[str | None] = [None] * len(self.nodes)
        self._ports_in_range = state.ports_in_range.copy()
        # Scan cursors: per free-GPU bucket and request, the lowest node index that may still
        # fit. Free resources only shrink during a cycle, except when a node (re)enters a bucket
        # or an undo gives resources back; those nodes are logged in ``_entered`` and lower the
        # cursors that have not seen them yet. Same answers as a full scan, far fewer checks.
        self._cursors: list[dict[tuple[object, ...], tuple[int, int]]] = [{} for _ in self.buckets]
        self._entered: list[list[int]] = [[] for _ in self.buckets]
        self.generation = 0  # changes whenever free resources shrink for good
        self.reason_cache: dict[tuple[object, ...], PendingReason | None] = {}
        # The shared state this pool still equals (None once it commits or reserves): trial
        # placements on it are remembered there, for every pool built on the same state.
        self._pristine: PoolState | None = state

    def _ports(self, i: int) -> set[int]:
        """Node ``i``'s used ports, copied from the shared state before this pool changes them."""
        if not self._own_ports[i]:
            self.used_ports[i] = set(self.used_ports[i])
            self._own_ports[i] = True
        return self.used_ports[i]

    def _count_ports(self, i: int) -> int:
        return count_ports(self.nodes[i], self.used_ports[i])

    def free_ports(self, i: int) -> int:
        low, high = self.nodes[i].port_range
        return (high - low) - self._ports_in_range[i]

    def fits(self, i: int, role: RoleRequest, port_count: int) -> bool:
        need = role.per_instance
        if need.gpu and role.gpu_type is not None and self.nodes[i].gpu_type != role.gpu_type:
            return False
        if role.needs and not role.can_run_on(self.nodes[i]):
            return False
        return (
            self.free_cpu[i] >= need.cpu_millis
            and self.free_memory[i] >= need.memory_mib
            and len(self.free_gpus[i]) >= need.gpu
            and (port_count == 0 or self.free_ports(i) >= port_count)
        )

    def find_node(self, role: RoleRequest) -> int | None:
        port_count = sum(count for _, count in role.ports)
        gpu_type = role.gpu_type if role.per_instance.gpu else None
        key = (role.per_instance, gpu_type, port_count, role.needs)
        for free in range(role.per_instance.gpu, self.max_gpus + 1):
            bucket = self.buckets[free]
            if not bucket:
                continue
            start = self._cursor(free, key)
            for position in range(bisect.bisect_left(bucket, start), len(bucket)):
                i = bucket[position]
                if self.fits(i, role, port_count):
                    self._cursors[free][key] = (i, len(self._entered[free]))
                    return i
            self._cursors[free][key] = (len(self.nodes), len(self._entered[free]))
        return None

    def _cursor(self, bucket: int, key: tuple[object, ...]) -> int:
        index, seen = self._cursors[bucket].get(key, (0, 0))
        entered = self._entered[bucket]
        if seen < len(entered):
            index = min(index, *entered[seen:])
        return index

    def _mark_entered(self, i: int) -> None:
        if self.is_active[i]:
            self._entered[len(self.free_gpus[i])].append(i)

    def place_job(
        self, job: JobRequest, *, commit: bool = True
    ) -> list[TaskPlacement] | PlacementFailure:
        """Place every task of ``job`` or none (``commit=False``: only try, change nothing).

        Roles go largest first. Greedy packing of a multi-role gang can miss a placement that
        exists, so if it fails, a few other role orders are tried before giving up.
        """
        state = self._pristine
        if commit or state is None:
            result = self._place(job, commit)
            if commit and not isinstance(result, PlacementFailure):
                self._pristine = None
            return result
        shape = job.shape()  # equal shapes are placed alike: the result names no job
        known = state.results.get(shape)
        if not isinstance(known, (list, PlacementFailure)):
            known = state.results[shape] = self._place(job, commit=False)
        return known if isinstance(known, PlacementFailure) else list(known)

    def _place(self, job: JobRequest, commit: bool) -> list[TaskPlacement] | PlacementFailure:
        first_failure: PlacementFailure | None = None
        for order in role_orders(job.roles):
            result = self._place_in_order(job, order, commit)
            if not isinstance(result, PlacementFailure):
                return result
            first_failure = first_failure or result
        assert first_failure is not None
        return first_failure

    def _place_in_order(
        self, job: JobRequest, order: Sequence[RoleRequest], commit: bool
    ) -> list[TaskPlacement] | PlacementFailure:
        mark = len(self._journal)
        placed: list[TaskPlacement] = []
        for role in order:
            for index in range(role.instances):
                node = self.find_node(role)
                if node is None:
                    self._undo_to(mark)
                    return PlacementFailure(role, index, len(placed))
                placed.append(self._take(node, role, index))
        if commit:
            del self._journal[mark:]
            self.generation += 1
        else:
            self._undo_to(mark)
        position = {role.name: i for i, role in enumerate(job.roles)}
        placed.sort(key=lambda p: (position[p.role], p.index))
        return placed

    def reserve(self, placements: list[TaskPlacement], job_id: str) -> None:
        """Hold, for ``job_id``, whatever of ``placements`` is free now (cpu, memory, those GPU
        indices and ports); the rest is expected to be freed later (exits, preemptions)."""
        self._pristine = None
        for placement in placements:
            i = self._index[placement.node]
            need = placement.resources
            self.free_cpu[i] -= min(max(self.free_cpu[i], 0), need.cpu_millis)
            self.free_memory[i] -= min(max(self.free_memory[i], 0), need.memory_mib)
            wanted = set(placement.gpu_indices)
            if wanted & set(self.free_gpus[i]):
                before = len(self.free_gpus[i])
                self.free_gpus[i] = [g for g in self.free_gpus[i] if g not in wanted]
                self._rebucket(i, before)
            self._ports(i).update(placement.all_ports())
            self._ports_in_range[i] = self._count_ports(i)
            self.reserved_by[i] = self.reserved_by[i] or job_id
        self.generation += 1

    def capacity_count(self, role: RoleRequest) -> int:
        """How many instances of ``role`` the pool could hold if nothing else were placed."""
        need = role.per_instance
        ports = sum(count for _, count in role.ports)
        total = 0
        for i in self.active:
            if need.gpu and role.gpu_type is not None and self.nodes[i].gpu_type != role.gpu_type:
                continue
            if not role.can_run_on(self.nodes[i]):
                continue
            limits = [
                self.free_cpu[i] // need.cpu_millis if need.cpu_millis else 1 << 30,
                self.free_memory[i] // need.memory_mib if need.memory_mib else 1 << 30,
                len(self.free_gpus[i]) // need.gpu if need.gpu else 1 << 30,
                self.free_ports(i) // ports if ports else 1 << 30,
            ]
            total += max(0, min(limits))
        return total

    def _take(self, i: int, role: RoleRequest, index: int) -> TaskPlacement:
        need = role.per_instance
        gpus = choose_gpus(self.free_gpus[i], need.gpu)
        undo = _Undo(i, need.cpu_millis, need.memory_mib, gpus, [], self.cursor[i])
        self.free_cpu[i] -= need.cpu_millis
        self.free_memory[i] -= need.memory_mib
        if gpus:
            before = len(self.free_gpus[i])
            taken = set(gpus)
            self.free_gpus[i] = [g for g in self.free_gpus[i] if g not in taken]
            self._rebucket(i, before)
        ports: list[tuple[str, tuple[int, ...]]] = []
        for label, count in role.ports:
            got = self._take_ports(i, count)
            undo.ports.extend(got)
            ports.append((label, tuple(got)))
        self._journal.append(undo)
        node = self.nodes[i]
        return TaskPlacement(
            role.name, index, node.name, node.address, need, tuple(gpus), tuple(ports)
        )

    def _take_ports(self, i: int, count: int) -> list[int]:
        low, high = self.nodes[i].port_range
        used = self._ports(i)
        port = self.cursor[i]
        got: list[int] = []
        for _ in range(high - low):
            if len(got) == count:
                break
            if port not in used:
                used.add(port)
                got.append(port)
            port = port + 1 if port + 1 < high else low
        self.cursor[i] = port
        self._ports_in_range[i] += len(got)
        return got

    def _undo_to(self, mark: int) -> None:
        while len(self._journal) > mark:
            undo = self._journal.pop()
            i = undo.node
            self.free_cpu[i] += undo.cpu
            self.free_memory[i] += undo.memory
            if undo.gpus:
                before = len(self.free_gpus[i])
                self.free_gpus[i] = sorted(self.free_gpus[i] + undo.gpus)
                self._rebucket(i, before)
            if undo.ports:
                self._ports(i).difference_update(undo.ports)
                self._ports_in_range[i] -= len(undo.ports)
            self.cursor[i] = undo.cursor
            self._mark_entered(i)  # it has more room again

    def _rebucket(self, i: int, before: int) -> None:
        after = len(self.free_gpus[i])
        if after == before or not self.is_active[i]:
            return
        old = self.buckets[before]
        del old[bisect.bisect_left(old, i)]
        bisect.insort(self.buckets[after], i)
        self._entered[after].append(i)


MAX_ROLE_ORDERS = 6


def role_orders(roles: Sequence[RoleRequest]) -> list[tuple[RoleRequest, ...]]:
    """Largest role first (fewest places to go), then other orders for multi-role gangs."""

    def by(*dims: str) -> tuple[RoleRequest, ...]:
        return tuple(sorted(roles, key=lambda r: tuple(-getattr(r.per_instance, d) for d in dims)))

    orders = [by("gpu", "cpu_millis", "memory_mib")]
    if len(roles) > 1:
        candidates = [by("gpu", "memory_mib", "cpu_millis"), by("memory_mib", "cpu_millis")]
        if len(roles) <= 3:
            candidates += list(itertools.permutations(roles))
        for order in candidates:
            if order not in orders:
                orders.append(order)
    return orders[:MAX_ROLE_ORDERS]


def choose_gpus(free: list[int], count: int) -> list[int]:
    """Pick ``count`` of the free GPU indices, preferring an aligned block of neighbours.

    A 2-GPU task on a node with GPUs 1, 2, 3 free takes 2 and 3 (an aligned pair, likely on one
    PCIe switch) rather than 1 and 2, and leaves the buddy structure HiveD relies on intact.
    """
    if count == 0:
        return []
    if count & (count - 1) == 0:
        free_set = set(free)
        for start in free:
            if start % count == 0 and all(start + k in free_set for k in range(count)):
                return list(range(start, start + count))
    return free[:count]
