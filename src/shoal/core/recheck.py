"""The applier's last look (as Nomad's plan applier): does an admission still fit the nodes as
they are now? The scheduler decided on a snapshot; between it and the write, a node may have been
cordoned, drained or lost, or another placement may have taken its room. Pure: the caller loads
the nodes and the tasks that hold resources inside its write transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.core.plan import Admission
from shoal.core.snapshot import NodeState


@dataclass(frozen=True, slots=True)
class Held:
    """What one active task holds on its node."""

    node: str
    cpu_millis: int
    memory_mib: int
    gpu_indices: tuple[int, ...]
    ports: tuple[int, ...]


@dataclass
class _Room:
    node: NodeState
    cpu_millis: int
    memory_mib: int
    gpus: set[int]  # free GPU indices
    used_ports: set[int]  # taken by other processes or by active tasks


def recheck_admission(
    admission: Admission,
    nodes: Mapping[str, NodeState],
    not_schedulable: Mapping[str, str],
    held: Sequence[Held],
) -> str | None:
    """Why the admission no longer fits (naming the node and the resource), or None if it does.
    ``not_schedulable``: each node that takes no new task, and its state (e.g. ``CORDONED``)."""
    rooms: dict[str, _Room] = {}
    for name in sorted({p.node for p in admission.placements}):
        if name not in nodes:
            return f"node {name} no longer exists"
        if name in not_schedulable:
            return f"node {name} is {not_schedulable[name]} now: it takes no new task"
        node = nodes[name]
        capacity = node.capacity
        free_gpus = set(node.gpu_indices)
        rooms[name] = _Room(
            node, capacity.cpu_millis, capacity.memory_mib, free_gpus, set(node.reserved_ports)
        )
    for task in held:
        room = rooms.get(task.node)
        if room is not None:
            room.cpu_millis -= task.cpu_millis
            room.memory_mib -= task.memory_mib
            room.gpus.difference_update(task.gpu_indices)
            room.used_ports.update(task.ports)
    for placement in admission.placements:
        room = rooms[placement.node]
        room.cpu_millis -= placement.resources.cpu_millis
        room.memory_mib -= placement.resources.memory_mib
        where = f"node {placement.node} for {placement.role}[{placement.index}]"
        if room.cpu_millis < 0:
            return f"{where}: its CPU was taken meanwhile"
        if room.memory_mib < 0:
            return f"{where}: its memory was taken meanwhile"
        taken_gpus = set(placement.gpu_indices) - room.gpus
        if taken_gpus:
            return f"{where}: GPU(s) {sorted(taken_gpus)} were taken meanwhile"
        low, high = room.node.port_range
        wanted = set(placement.all_ports())
        taken_ports = {p for p in wanted if p in room.used_ports or not low <= p < high}
        if taken_ports:
            return f"{where}: port(s) {sorted(taken_ports)} were taken meanwhile"
        room.gpus.difference_update(placement.gpu_indices)
        room.used_ports.update(wanted)
    return None
