"""Free-resource states shared between node pools, so that building a pool costs O(nodes).

A cycle builds many pools over the same nodes whose allocations differ only a little: the pool
of the cycle itself, then "what if these jobs stopped?" simulations, each holding the snapshot's
allocations minus those of a few jobs plus the cycle's admissions so far. A ``Layout`` keeps, per
tuple of nodes, the free resources after the last few allocation sets, and makes a new state from
the closest one: by holding the allocations appended since, or from a base state by giving back
what was removed and holding what was added. What is free on a node depends only on which
allocations are on it, so the lists are those a build from scratch would give. Giving back is
exact only on a node where no GPU index or port is held twice (or is reserved, or absent); such
a node is marked and recounted from its remaining allocations instead.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shoal.core.snapshot import NodeState, TaskAllocation

STATES_KEPT = 16  # per nodes tuple
LAYOUTS_KEPT = 2  # a cycle uses two: its own nodes, and all nodes for "could it ever fit?"
REBASE_AFTER = 256  # allocations a difference holds or gives back before it becomes the base


def count_ports(node: NodeState, used: set[int]) -> int:
    low, high = node.port_range
    return sum(1 for p in used if low <= p < high)


@dataclass(slots=True, eq=False)
class PoolState:
    """Free resources of every node of a layout once ``allocations`` hold theirs. Never changed
    once made: pools copy the lists (and a node's port set before they change it)."""

    allocations: tuple[TaskAllocation, ...]
    free_cpu: list[int]
    free_memory: list[int]
    free_gpus: list[list[int]]  # a node's list is replaced, never changed in place
    used_ports: list[set[int]]
    ports_in_range: list[int]
    buckets: list[list[int]]
    overlapping: frozenset[int]  # nodes where a GPU or port is held twice, reserved or absent
    # trial placements on this state by job shape (filled in and read by NodePool.place_job)
    results: dict[tuple[object, ...], object] = field(default_factory=dict)
    # made when the state is first the base of a difference
    by_id: dict[int, TaskAllocation] | None = None
    ids: frozenset[int] = frozenset()
    by_node: dict[int, list[TaskAllocation]] | None = None


class _Draft:
    """A state being made from a parent's lists: a node's port set is copied when it changes."""

    def __init__(self, layout: Layout, parent: PoolState) -> None:
        self.layout = layout
        self.parent = parent
        self.free_cpu = parent.free_cpu.copy()
        self.free_memory = parent.free_memory.copy()
        self.free_gpus = parent.free_gpus.copy()
        self.used_ports = parent.used_ports.copy()
        self.ports_in_range = parent.ports_in_range.copy()
        self.overlapping = set(parent.overlapping)
        self.owned: set[int] = set()
        self.touched: set[int] = set()

    def _ports(self, i: int) -> set[int]:
        if i not in self.owned:
            self.used_ports[i] = set(self.used_ports[i])
            self.owned.add(i)
        return self.used_ports[i]

    def reset(self, i: int) -> None:
        """Node ``i`` as if nothing held anything on it."""
        node = self.layout.nodes[i]
        self.free_cpu[i] = node.capacity.cpu_millis
        self.free_memory[i] = node.capacity.memory_mib
        self.free_gpus[i] = sorted(node.gpu_indices)
        self.used_ports[i] = set(node.reserved_ports)
        self.ports_in_range[i] = count_ports(node, self.used_ports[i])
        self.owned.add(i)
        self.touched.add(i)
        self.overlapping.discard(i)

    def hold(self, alloc: TaskAllocation, i: int) -> None:
        resources = alloc.resources
        self.free_cpu[i] -= resources.cpu_millis
        self.free_memory[i] -= resources.memory_mib
        taken = alloc.gpu_indices
        if taken:
            free = self.free_gpus[i]
            left = [g for g in free if g not in taken]
            if len(left) != len(free) - len(taken):
                self.overlapping.add(i)
            self.free_gpus[i] = left
        if alloc.ports:
            used = self._ports(i)
            low, high = self.layout.nodes[i].port_range
            for port in alloc.ports:
                if port in used:
                    self.overlapping.add(i)
                else:
                    used.add(port)
                    self.ports_in_range[i] += low <= port < high
        self.touched.add(i)

    def give_back(self, alloc: TaskAllocation, i: int) -> None:
        """Undo ``hold(alloc, i)`` on a node that is not overlapping."""
        resources = alloc.resources
        self.free_cpu[i] += resources.cpu_millis
        self.free_memory[i] += resources.memory_mib
        if alloc.gpu_indices:
            self.free_gpus[i] = sorted(self.free_gpus[i] + list(alloc.gpu_indices))
        if alloc.ports:
            used = self._ports(i)
            low, high = self.layout.nodes[i].port_range
            for port in alloc.ports:
                used.remove(port)
                self.ports_in_range[i] -= low <= port < high
        self.touched.add(i)

    def hold_all(self, allocations: Iterable[TaskAllocation]) -> None:
        index = self.layout.index
        for alloc in allocations:
            i = index.get(alloc.node)
            if i is not None:  # a task on a node that has left holds nothing to give away
                self.hold(alloc, i)

    def finish(self, allocations: tuple[TaskAllocation, ...]) -> PoolState:
        parent, touched, is_active = self.parent, self.touched, self.layout.is_active
        if len(touched) > len(self.free_gpus) // 8:
            buckets = self.layout.bucket(self.free_gpus)
        else:
            buckets = [bucket.copy() for bucket in parent.buckets]
            for i in sorted(touched):
                before, after = len(parent.free_gpus[i]), len(self.free_gpus[i])
                if before != after and is_active[i]:
                    del buckets[before][bisect.bisect_left(buckets[before], i)]
                    bisect.insort(buckets[after], i)
        return PoolState(
            allocations,
            self.free_cpu,
            self.free_memory,
            self.free_gpus,
            self.used_ports,
            self.ports_in_range,
            buckets,
            frozenset(self.overlapping),
        )


class Layout:
    """The node order and per-node constants for one ``nodes`` sequence, and the states of the
    last few allocation sets over it (see the module docstring)."""

    def __init__(
        self,
        source: Sequence[NodeState],
        include_unschedulable: bool,
        prefer: dict[str, int] | None,
        keep: int,
    ) -> None:
        rank = prefer or {}
        self.source = source
        self.nodes = sorted(source, key=lambda n: (rank.get(n.name, 0), n.name))
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.is_active = [n.schedulable or include_unschedulable for n in self.nodes]
        self.active = [i for i, on in enumerate(self.is_active) if on]
        self.max_gpus = max((len(n.gpu_indices) for n in self.nodes), default=0)
        self.port_low = [n.port_range[0] for n in self.nodes]
        free_gpus = [sorted(n.gpu_indices) for n in self.nodes]
        used_ports = [set(n.reserved_ports) for n in self.nodes]
        self.empty = PoolState(
            (),
            [n.capacity.cpu_millis for n in self.nodes],
            [n.capacity.memory_mib for n in self.nodes],
            free_gpus,
            used_ports,
            [count_ports(n, used) for n, used in zip(self.nodes, used_ports, strict=True)],
            self.bucket(free_gpus),
            frozenset(),
        )
        self._keep = keep
        self._states: list[PoolState] = [self.empty]  # least recently used first
        self._base: PoolState | None = None  # what differences start from
        self._lock = threading.Lock()

    def bucket(self, free_gpus: list[list[int]]) -> list[list[int]]:
        """Active nodes by free GPU count, each bucket in node order."""
        buckets: list[list[int]] = [[] for _ in range(self.max_gpus + 1)]
        for i in self.active:
            buckets[len(free_gpus[i])].append(i)
        return buckets

    def state_for(self, allocations: Iterable[TaskAllocation]) -> PoolState:
        wanted = tuple(allocations)
        with self._lock:
            kept = list(self._states)
        state = self._extend(kept, wanted) or self._diff(wanted)
        if state is None:
            draft = _Draft(self, self.empty)
            draft.hold_all(wanted)
            state = self._base = draft.finish(wanted)
        with self._lock:
            if state in self._states:
                self._states.remove(state)
            self._states.append(state)
            del self._states[: max(len(self._states) - self._keep, 0)]
        return state

    def _extend(
        self, kept: list[PoolState], wanted: tuple[TaskAllocation, ...]
    ) -> PoolState | None:
        """From the kept state whose allocations start ``wanted`` (the longest such, not empty)."""
        if not wanted:
            return self.empty
        for best in sorted(kept, key=lambda s: len(s.allocations), reverse=True):
            size = len(best.allocations)
            if (
                0 < size <= len(wanted)
                and wanted[size - 1] is best.allocations[size - 1]
                and wanted[:size] == best.allocations
            ):
                break
        else:
            return None
        if len(best.allocations) == len(wanted):
            return best
        draft = _Draft(self, best)
        draft.hold_all(wanted[len(best.allocations) :])
        return draft.finish(wanted)

    def _diff(self, wanted: tuple[TaskAllocation, ...]) -> PoolState | None:
        """From the base, giving back what ``wanted`` lacks and holding what it adds, if that is
        a small difference (allocations are compared by identity)."""
        base = self._base
        ids = set(map(id, wanted))
        if base is None or len(ids) != len(wanted):
            return None  # no base, or the same allocation twice: build from scratch
        if base.by_id is None:
            base.by_id = dict(zip(map(id, base.allocations), base.allocations, strict=True))
            base.ids = frozenset(base.by_id)
        by_id, base_ids = base.by_id, base.ids
        removed = base_ids.difference(ids)
        extra = len(wanted) - (len(base.allocations) - len(removed))  # ``wanted`` not in base
        if len(by_id) != len(base.allocations) or 2 * (len(removed) + extra) > len(wanted):
            return None
        added = wanted[len(wanted) - extra :] if extra else ()  # usually appended at the end
        if not base_ids.isdisjoint(map(id, added)):
            added = tuple(a for a in wanted if id(a) not in base_ids)
        state = self.derive(base, [by_id[key] for key in removed], added, wanted)
        if len(added) + len(removed) > REBASE_AFTER:
            self._base = state  # later differences from it are smaller
        return state

    def derive(
        self,
        base: PoolState,
        removed: Sequence[TaskAllocation],
        added: Sequence[TaskAllocation],
        allocations: tuple[TaskAllocation, ...] = (),
    ) -> PoolState:
        """``base`` with ``removed`` (allocations of ``base``) given back and ``added`` held:
        O(nodes + changes). ``allocations``: what the new state holds in all, if known (states
        made without it are not kept or reused)."""
        draft = _Draft(self, base)
        recount: set[int] = set()
        gone = {id(alloc) for alloc in removed}
        for alloc in removed:
            i = self.index.get(alloc.node)
            if i is None:
                continue
            if i in base.overlapping:
                recount.add(i)
            else:
                draft.give_back(alloc, i)
        for i in recount:
            draft.reset(i)
            for alloc in self._by_node(base).get(i, ()):
                if id(alloc) not in gone:
                    draft.hold(alloc, i)
        draft.hold_all(added)
        return draft.finish(allocations)

    def _by_node(self, state: PoolState) -> dict[int, list[TaskAllocation]]:
        if state.by_node is None:
            by_node: dict[int, list[TaskAllocation]] = {}
            for alloc in state.allocations:
                i = self.index.get(alloc.node)
                if i is not None:
                    by_node.setdefault(i, []).append(alloc)
            state.by_node = by_node
        return state.by_node


class Layouts:
    """The layouts (and their kept states) of one caller: part of its ``SchedulerCache``, so two
    schedulers in one process never share them. Not thread-safe across callers by design: each
    scheduler owns one."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, bool], Layout] = {}

    def layout_for(
        self, nodes: Sequence[NodeState], include_unschedulable: bool, prefer: dict[str, int] | None
    ) -> Layout:
        """The layout of ``nodes``, kept for the same tuple of (immutable) nodes: within a cycle
        every pool is built over ``snapshot.nodes``. Pools with a node preference are not kept."""
        if prefer or type(nodes) is not tuple:
            return Layout(nodes, include_unschedulable, prefer, keep=1)
        key = (id(nodes), include_unschedulable)
        layout = self._kept.pop(key, None)
        if layout is None or layout.source is not nodes:
            layout = Layout(nodes, include_unschedulable, None, keep=STATES_KEPT)
        self._kept[key] = layout  # most recently used last
        while len(self._kept) > LAYOUTS_KEPT:
            del self._kept[next(iter(self._kept))]
        return layout


def layout_for(
    nodes: Sequence[NodeState],
    include_unschedulable: bool,
    prefer: dict[str, int] | None,
    layouts: Layouts | None,
) -> Layout:
    """From ``layouts`` when the caller keeps some, else a layout for this one pool."""
    if layouts is None:
        return Layout(nodes, include_unschedulable, prefer, keep=1)
    return layouts.layout_for(nodes, include_unschedulable, prefer)
