"""Checks the simulator can run after every cycle (tests turn them on): nothing is
over-allocated, no GPU index is handed to two tasks, and every job the scheduler sees has the
priority a rescan of every job's service would give it (the engine only reprices some)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from shoal.core.snapshot import ClusterSnapshot, NodeState, TaskAllocation


class InvariantViolation(AssertionError):
    pass


def check_allocations(
    nodes: Sequence[NodeState], allocations: Iterable[TaskAllocation], now: float
) -> None:
    capacity = {node.name: node for node in nodes}
    used: dict[str, list[int]] = {name: [0, 0, 0] for name in capacity}
    gpus: dict[str, set[int]] = {name: set() for name in capacity}
    for alloc in allocations:
        if alloc.node not in capacity:
            raise InvariantViolation(f"t={now}: job {alloc.job_id} on unknown node {alloc.node}")
        total = used[alloc.node]
        total[0] += alloc.resources.cpu_millis
        total[1] += alloc.resources.memory_mib
        total[2] += alloc.resources.gpu
        if len(alloc.gpu_indices) != alloc.resources.gpu:
            raise InvariantViolation(
                f"t={now}: job {alloc.job_id} holds {alloc.resources.gpu} GPUs but indices "
                f"{alloc.gpu_indices}"
            )
        taken = gpus[alloc.node]
        clash = taken.intersection(alloc.gpu_indices)
        if clash:
            raise InvariantViolation(
                f"t={now}: GPU(s) {sorted(clash)} of {alloc.node} given twice (job {alloc.job_id})"
            )
        taken.update(alloc.gpu_indices)
    for name, (cpu, memory, gpu) in used.items():
        cap = capacity[name].capacity
        if cpu > cap.cpu_millis or memory > cap.memory_mib or gpu > cap.gpu:
            raise InvariantViolation(
                f"t={now}: node {name} over-allocated: {cpu}m cpu, {memory} MiB, {gpu} GPU "
                f"used of {cap.describe()}"
            )


def check_priorities(snapshot: ClusterSnapshot, expected: Mapping[str, int], now: float) -> None:
    """Every queued job and running task carries the priority ``expected`` gives its job."""
    held = ((a.job_id, a.priority) for a in snapshot.allocations)
    for job_id, priority in (*((j.job_id, j.priority) for j in snapshot.queue), *held):
        if priority != expected[job_id]:
            raise InvariantViolation(
                f"t={now}: job {job_id} has priority {priority}, its service gives "
                f"{expected[job_id]}"
            )
