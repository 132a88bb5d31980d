""" "Could this gang ever fit?", answered exactly for small multi-role jobs by a bounded search.

Greedy placement is exact for one role (identical tasks) but can miss placements of mixed roles.
Before a multi-role job is called infeasible, this search looks at every way to put its tasks on
the idle nodes (GPU indices and ports only matter as counts on an idle node), breaking symmetry
between identical tasks and identical nodes. It gives up after ``budget`` steps and says "don't
know", so the scheduler never rejects a job it merely failed to place.
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.core.snapshot import JobRequest, NodeState, RoleRequest

Capacity = list[int]  # cpu millis, memory MiB, free GPUs, free ports


def _need(role: RoleRequest) -> tuple[int, int, int, int]:
    ports = sum(count for _, count in role.ports)
    r = role.per_instance
    return (r.cpu_millis, r.memory_mib, r.gpu, ports)


def _capacity(node: NodeState) -> Capacity:
    low, high = node.port_range
    free_ports = (high - low) - sum(1 for p in node.reserved_ports if low <= p < high)
    c = node.capacity
    return [c.cpu_millis, c.memory_mib, len(node.gpu_indices), free_ports]


def could_fit(nodes: Sequence[NodeState], job: JobRequest, budget: int = 2_000) -> bool | None:
    """True if some placement of the whole gang on the idle ``nodes`` exists, False if none does,
    None if the search ran out of budget before knowing."""
    capacities = [_capacity(n) for n in nodes]
    tasks: list[tuple[int, RoleRequest]] = []
    ordered = sorted(job.roles, key=lambda r: tuple(-x for x in _need(r)))
    for position, role in enumerate(ordered):
        tasks.extend((position, role) for _ in range(role.instances))
    steps = [0]

    def allowed(node: NodeState, role: RoleRequest) -> bool:
        if not role.can_run_on(node):
            return False
        if role.per_instance.gpu and role.gpu_type is not None:
            return node.gpu_type == role.gpu_type
        return True

    def place(k: int, first_node: int) -> bool | None:
        if k == len(tasks):
            return True
        steps[0] += 1
        if steps[0] > budget:
            return None
        position, role = tasks[k]
        need = _need(role)
        tried: set[tuple[int, ...]] = set()
        unknown = False
        for i in range(first_node, len(nodes)):
            cap = capacities[i]
            key = (*cap, hash(nodes[i].gpu_type), hash(nodes[i].lacks))
            if (
                key in tried
                or not allowed(nodes[i], role)
                or any(c < n for c, n in zip(cap, need, strict=True))
            ):
                continue
            tried.add(key)
            for d in range(4):
                cap[d] -= need[d]
            same_role_next = k + 1 < len(tasks) and tasks[k + 1][0] == position
            result = place(k + 1, i if same_role_next else 0)
            for d in range(4):
                cap[d] += need[d]
            if result:
                return True
            unknown |= result is None
        return None if unknown else False

    return place(0, 0)
