"""Checks the simulator can run after every cycle (tests turn them on): nothing is
over-allocated, and no GPU index is handed to two tasks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shoal.core.snapshot import NodeState, TaskAllocation


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
