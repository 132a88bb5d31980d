"""Quota usage summed from task allocations: per VC, per (VC, user) GPUs, per (VC, GPU type).

Every cycle needs these sums, and from one cycle to the next only a few tasks start or stop. So a
``UsageMemo`` (owned by the caller, part of its ``SchedulerCache``) keeps the sums of the last
allocation tuple it saw, and the next call counts only the tasks added and removed since, matched
by object identity (the memo holds the old tuple, so no identity can be reused while it is
compared). The result is exactly what a recount gives; when most tasks changed (as when the
server reloads them) it recounts. Without a memo, every call recounts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shoal.core.snapshot import NodeState, TaskAllocation

if TYPE_CHECKING:
    from shoal.core.quota import RunningJob


@dataclass(slots=True)
class Usage:
    by_vc: dict[str, list[int]] = field(default_factory=dict)  # [cpu millis, MiB, GPUs]
    user_gpus: dict[tuple[str, str], int] = field(default_factory=dict)
    typed: dict[tuple[str, str], int] = field(default_factory=dict)
    # [cpu millis, MiB, GPUs] of tasks not being stopped, per (VC, priority): what preempting
    # lower priorities inside a VC could free
    by_priority: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def copy(self) -> Usage:
        return Usage(
            {vc: list(sums) for vc, sums in self.by_vc.items()},
            dict(self.user_gpus),
            dict(self.typed),
            {key: list(sums) for key, sums in self.by_priority.items()},
        )

    def count(self, alloc: TaskAllocation, types: dict[str, str], sign: int) -> None:
        if alloc.priority < 0:  # `oppo` jobs use no quota
            return
        res = alloc.resources
        sums = self.by_vc.get(alloc.virtual_cluster)
        if sums is None:
            sums = self.by_vc[alloc.virtual_cluster] = [0, 0, 0]
        sums[0] += sign * res.cpu_millis
        sums[1] += sign * res.memory_mib
        if not alloc.terminating:
            key_p = (alloc.virtual_cluster, alloc.priority)
            held = self.by_priority.get(key_p)
            if held is None:
                held = self.by_priority[key_p] = [0, 0, 0]
            held[0] += sign * res.cpu_millis
            held[1] += sign * res.memory_mib
            held[2] += sign * res.gpu
        if res.gpu:
            sums[2] += sign * res.gpu
            key = (alloc.virtual_cluster, alloc.user)
            self.user_gpus[key] = self.user_gpus.get(key, 0) + sign * res.gpu
            gpu_type = types.get(alloc.node)
            if gpu_type is not None:
                typed_key = (alloc.virtual_cluster, gpu_type)
                self.typed[typed_key] = self.typed.get(typed_key, 0) + sign * res.gpu


class UsageMemo:
    """The sums of the last allocations seen, for one caller (never shared between schedulers)."""

    def __init__(self) -> None:
        self.nodes: tuple[NodeState, ...] | None = None
        self.types: dict[str, str] = {}
        self.by_id: dict[int, TaskAllocation] = {}
        self.allocations: Sequence[TaskAllocation] = ()
        self.usage = Usage()
        # Running jobs (grouped allocations), kept up to date for the jobs that changed; made on
        # first use (only preemption needs them).
        self.by_job: dict[str, list[TaskAllocation]] | None = None
        self.dirty_jobs: set[str] = set()
        self.running: dict[str, RunningJob] = {}
        self.running_order: list[tuple[tuple[int, float, str], str]] = []


def node_gpu_types(nodes: tuple[NodeState, ...], memo: UsageMemo | None = None) -> dict[str, str]:
    """GPU type by node name, for nodes that have one (kept while the node tuple is the same)."""
    if memo is None:
        return {n.name: n.gpu_type for n in nodes if n.gpu_type is not None}
    if nodes is not memo.nodes:
        memo.nodes = nodes
        memo.types = {n.name: n.gpu_type for n in nodes if n.gpu_type is not None}
        memo.by_id, memo.usage = {}, Usage()  # typed sums depend on the nodes: recount
        memo.by_job = None  # and the running jobs are regrouped, not added to twice
    return memo.types


def usage_of(
    nodes: tuple[NodeState, ...],
    allocations: Sequence[TaskAllocation],
    memo: UsageMemo | None = None,
) -> Usage:
    """A fresh (caller-owned) copy of the sums for ``allocations``."""
    types = node_gpu_types(nodes, memo)
    if memo is None:
        usage = Usage()
        for alloc in allocations:
            usage.count(alloc, types, 1)
        return usage
    by_id = dict(zip(map(id, allocations), allocations, strict=True))
    old = memo.by_id
    added = by_id.keys() - old.keys()
    removed = old.keys() - by_id.keys()
    if len(added) + len(removed) > len(by_id) // 2 + 8:
        usage = Usage()
        for alloc in allocations:
            usage.count(alloc, types, 1)
        memo.by_job = None  # regrouped on first use
    else:
        usage = memo.usage
        by_job = memo.by_job
        for key in removed:
            alloc = old[key]
            usage.count(alloc, types, -1)
            if by_job is not None:
                held = by_job[alloc.job_id]
                held.remove(alloc)  # by equality: equal allocations are interchangeable
                memo.dirty_jobs.add(alloc.job_id)
        for key in added:
            alloc = by_id[key]
            usage.count(alloc, types, 1)
            if by_job is not None:
                by_job.setdefault(alloc.job_id, []).append(alloc)
                memo.dirty_jobs.add(alloc.job_id)
    memo.by_id, memo.allocations, memo.usage = by_id, allocations, usage
    return usage.copy()
