"""Explain why a job's gang did not fit: a reason code and a sentence naming the scarce resource."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import PendingReason, ReasonCode
from shoal.core.snapshot import CONTAINER, JobRequest, RoleRequest

# What a node that lacks a capability cannot do, and what a role that needs it does (wording).
_CANNOT = {CONTAINER: "run containers", "shm": "give a task a /dev/shm of its own size"}
_NEEDS = {CONTAINER: "runs in a container", "shm": "asks for a /dev/shm of its own size"}
_NAMED = 3  # nodes named in a message, at most


def explain(pool: NodePool, job: JobRequest, failure: PlacementFailure) -> PendingReason:
    """Why ``failure`` happened, judged on the pool as it is now (the job's own tries undone)."""
    role = failure.role
    task = f"{role.name}[{failure.index}]"
    if not pool.active:
        return PendingReason(ReasonCode.NO_SCHEDULABLE_NODES, "no schedulable node is registered")
    ports = sum(c for _, c in role.ports)
    key = (role.per_instance, role.gpu_type, ports, role.needs, pool.generation)
    if key not in pool.reason_cache:  # many shapes fail on the same task need: explain it once
        pool.reason_cache[key] = _single_task_reason(pool, role, "{task}")
    single = pool.reason_cache[key]
    if single is not None:
        return PendingReason(single.code, single.message.replace("{task}", task))
    need = job.total
    lacking = _lacking(pool, pool.active, job.roles)
    return PendingReason(
        ReasonCode.GANG_DOES_NOT_FIT,
        f"all {job.task_count} tasks must start together and only {failure.placed} fit at once "
        f"(the job needs {need.describe()} in all; {task} found no room after the others"
        f"{'; ' + lacking if lacking else ''})",
    )


def _lacking(pool: NodePool, nodes: Sequence[int], roles: Sequence[RoleRequest]) -> str:
    """Which of ``nodes`` lack what ``roles`` need, and why, as their agents said: "2 nodes
    cannot run containers: podman is not installed (n1, n2)" ("" when none does)."""
    needs = frozenset(chain.from_iterable(role.needs for role in roles))
    if not needs:
        return ""
    groups: dict[tuple[str, str], list[str]] = {}
    for i in nodes:
        node = pool.nodes[i]
        for what, why in node.unsupported:
            if what in needs:
                groups.setdefault((what, why), []).append(node.name)
    parts = []
    for (what, why), names in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
        shown = ", ".join(names[:_NAMED]) + (", ..." if len(names) > _NAMED else "")
        count = f"{len(names)} node{'s' if len(names) > 1 else ''}"
        cannot = _CANNOT.get(what, f"provide {what!r}")
        parts.append(f"{count} cannot {cannot}: {why} ({shown})")
    return "; ".join(parts)


def _single_task_reason(pool: NodePool, role: RoleRequest, task: str) -> PendingReason | None:
    """The reason even one instance of ``role`` does not fit, or None if one would. Nodes that
    lack what the role needs are left out, and the reason says so."""
    if not role.needs:
        return _fitting_reason(pool, role, task, pool.active)
    unable = [i for i in pool.active if not role.can_run_on(pool.nodes[i])]
    if not unable:
        return _fitting_reason(pool, role, task, pool.active)
    lacking = _lacking(pool, unable, (role,))
    able = [i for i in pool.active if role.can_run_on(pool.nodes[i])]
    if not able:
        needs = " and ".join(_NEEDS.get(what, f"needs {what!r}") for what in sorted(role.needs))
        return PendingReason(
            ReasonCode.UNSUPPORTED_BY_NODES,
            f"{task} {needs}; no schedulable node can run it: {lacking}",
        )
    reason = _fitting_reason(pool, role, task, able)
    if reason is None:
        return None
    return PendingReason(reason.code, f"{reason.message} (and {lacking})")


def _fitting_reason(
    pool: NodePool, role: RoleRequest, task: str, candidates: list[int]
) -> PendingReason | None:
    """The reason one instance of ``role`` fits on none of ``candidates`` (active nodes, in
    ascending order), or None if it fits on one."""
    need = role.per_instance
    if need.gpu and role.gpu_type is not None:
        candidates = [i for i in candidates if pool.nodes[i].gpu_type == role.gpu_type]
        if not candidates:
            return PendingReason(
                ReasonCode.GPU_TYPE_UNAVAILABLE,
                f"{task} needs GPU type {role.gpu_type!r}; no schedulable node has it",
            )
    if need.gpu:
        if candidates is pool.active:  # every active node: its free-GPU buckets say it all
            largest = max(k for k, bucket in enumerate(pool.buckets) if bucket or k == 0)
            best = pool.buckets[largest][0] if pool.buckets[largest] else candidates[0]
        else:
            best = max(candidates, key=lambda i: len(pool.free_gpus[i]))  # first max: lowest
            largest = len(pool.free_gpus[best])
        if largest < need.gpu:
            where = f"{largest} on {pool.nodes[best].name}" if largest else "0 (no GPU is free)"
            return PendingReason(
                ReasonCode.INSUFFICIENT_GPU,
                f"{task} needs {need.gpu} GPUs on one node; the largest free block is {where}",
            )
        if candidates is pool.active:  # ascending node order, as the scan below expects
            candidates = sorted(chain.from_iterable(pool.buckets[need.gpu :]))
        else:
            candidates = [i for i in candidates if len(pool.free_gpus[i]) >= need.gpu]
    with_gpus = f" on a node with {need.gpu} free GPUs" if need.gpu else ""
    best = max(candidates, key=pool.free_cpu.__getitem__)
    if pool.free_cpu[best] < need.cpu_millis:
        return PendingReason(
            ReasonCode.INSUFFICIENT_CPU,
            f"{task} needs {need.cpu_millis / 1000:g} cpu{with_gpus}; the most free is "
            f"{max(pool.free_cpu[best], 0) / 1000:g} on {pool.nodes[best].name}",
        )
    candidates = [i for i in candidates if pool.free_cpu[i] >= need.cpu_millis]
    best = max(candidates, key=pool.free_memory.__getitem__)
    if pool.free_memory[best] < need.memory_mib:
        return PendingReason(
            ReasonCode.INSUFFICIENT_MEMORY,
            f"{task} needs {need.memory_mib} MiB of memory{with_gpus} and enough cpu; the most "
            f"free is {max(pool.free_memory[best], 0)} MiB on {pool.nodes[best].name}",
        )
    candidates = [i for i in candidates if pool.free_memory[i] >= need.memory_mib]
    ports = sum(count for _, count in role.ports)
    best = max(candidates, key=pool.free_ports)
    if pool.free_ports(best) < ports:
        return PendingReason(
            ReasonCode.INSUFFICIENT_PORTS,
            f"{task} needs {ports} ports; the most free on a fitting node is "
            f"{pool.free_ports(best)} on {pool.nodes[best].name}",
        )
    return None


def never_fits(reason: PendingReason) -> PendingReason:
    """Turn a reason found on the empty cluster into a "this can never run here" verdict."""
    return PendingReason(
        ReasonCode.NEVER_FITS,
        f"can never run on this cluster, even with every node idle: {reason.message}",
    )
