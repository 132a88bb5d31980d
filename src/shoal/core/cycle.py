"""One scheduling cycle: jobs in queue order, each admitted whole, left waiting with a reason,
reported infeasible (not even the idle cluster, or not even all its VC may ever use, could hold
it: ``quota.beyond_reach``), or (with virtual clusters) given room by preempting jobs it is
entitled to displace. With virtual clusters, the first blocked job of each VC also keeps a
reservation, so later jobs backfill only around it and never delay it.

A cycle counts its work against a ``Budget`` (core/budget.py): placement attempts, preemption
what-ifs and, if the caller gives one, a deadline. ``stop_early`` says when to stop examining all
but the mandatory jobs of the window.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from shoal.core.budget import Budget
from shoal.core.cache import SchedulerCache
from shoal.core.diagnosis import explain
from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import (
    Admission,
    InfeasibleJob,
    PendingJob,
    PendingReason,
    Preemption,
    ReasonCode,
    TaskPlacement,
)
from shoal.core.poolstate import Layout
from shoal.core.preemption import choose_victims, describe_victim, eligible_victims
from shoal.core.queueindex import queue_key
from shoal.core.quota import Admission as Mode
from shoal.core.quota import QuotaLedger, RunningJob
from shoal.core.snapshot import ClusterSnapshot, JobRequest, TaskAllocation, allocation_for

NeverFits = Callable[[JobRequest], PendingReason | None]


DEADLINE_EVERY = 16  # jobs examined between two looks at the deadline


def _behind_head(job: JobRequest, head: str) -> PendingReason:
    return PendingReason(
        ReasonCode.RESERVED_FOR_HEAD,
        f"virtual cluster {job.virtual_cluster} runs its jobs in strict FIFO order, and job "
        f"{head}, ahead of this one, is still waiting",
    )


class _WhatIfsSpent(Exception):
    """The cycle's budget of preemption simulations is spent."""


class Cycle:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        never_fits: NeverFits,
        cache: SchedulerCache,
        budget: Budget,
    ) -> None:
        self.snapshot = snapshot
        self.never_fits_check = never_fits
        self.cache = cache
        self.budget = budget
        self.pool = NodePool(snapshot.nodes, snapshot.allocations, layouts=cache.layouts)
        if snapshot.virtual_clusters:
            self.quota: QuotaLedger | None = QuotaLedger.from_allocations(
                snapshot.virtual_clusters, snapshot.nodes, snapshot.allocations, cache.usage
            )
        else:  # no quotas: only the jobs being stopped matter
            self.quota = None
        self._inside: set[str] | None = None
        self._simulated: dict[tuple[object, ...], list[TaskPlacement] | None] = {}
        self._kept_what_ifs = cache.what_ifs_for(snapshot)  # valid across cycles
        self._no_relief: set[tuple[object, ...]] = set()
        self._eligible: dict[tuple[str, int, bool], list[RunningJob]] = {}
        self._by_job: dict[str, list[TaskAllocation]] | None = None
        self._head_layout: Layout | None = None
        self._running_by_id: dict[str, RunningJob] | None = None
        self.placements_tried = 0
        self.what_ifs_run = 0
        self.examined = 0
        self.stopped_by: str | None = None
        self._gpu_room: tuple[int, dict[str, int]] | None = None
        self.terminating = frozenset(a.job_id for a in snapshot.allocations if a.terminating)
        self.taken: set[str] = set()  # victims chosen in this cycle
        self.admitted_allocations: list[TaskAllocation] = []
        self.reserved_vcs: set[str] = set()
        # Nothing is freed during a cycle, so a shape that did not fit cannot fit later in it.
        self.blocked: dict[tuple[object, ...], PendingReason] = {}
        self.never: dict[tuple[object, ...], PendingReason] = {}
        self.admissions: list[Admission] = []
        self.infeasible: list[InfeasibleJob] = []
        self.preemptions: list[Preemption] = []
        self._gone: dict[str, list[tuple[int, float, str]]] = {}  # admitted or infeasible
        self._waiting: list[tuple[JobRequest, PendingReason]] = []
        # Strict-FIFO VCs: the first waiting job of each, which every later job waits behind.
        self.strict_vcs = {vc.name for vc in snapshot.virtual_clusters if vc.strict_fifo}
        self.strict_heads: dict[str, str] = {}

    @property
    def inside(self) -> set[str]:
        """Running jobs inside their VC's guarantee: computed when preemption first asks."""
        if self._inside is None:
            self._inside = self.quota.inside_guarantee() if self.quota is not None else set()
        return self._inside

    def order(self, queue: Sequence[JobRequest]) -> list[JobRequest]:
        """Priority, then submission time, then id; with VCs, jobs inside their guarantee come
        before borrowing ones and `oppo` jobs last, so capacity given back by preemption goes to
        the job it was reclaimed for, not back to the borrower that was submitted earlier."""
        if self.quota is None:
            return sorted(queue, key=queue_key)
        rank = {
            Mode.GUARANTEED: 0,
            Mode.RECLAIM_WITHIN: 0,
            Mode.BORROWING: 1,
            Mode.OPPORTUNISTIC: 2,
        }

        def key(job: JobRequest) -> tuple[int, int, float, str]:
            assert self.quota is not None
            verdict = self.quota.classify(job)
            return (rank.get(verdict, 0) if isinstance(verdict, Mode) else 0, *queue_key(job))

        return sorted(queue, key=key)

    def stop_early(self) -> bool:
        """Whether the budget is spent (then only mandatory jobs are still examined)."""
        if self.stopped_by is None:
            if self.placements_tried >= self.budget.placements:
                self.stopped_by = "placements"
            elif (
                self.budget.deadline is not None
                and self.examined % DEADLINE_EVERY == 0
                and self.budget.deadline()
            ):
                self.stopped_by = "deadline"
        return self.stopped_by is not None

    def consider(self, job: JobRequest) -> None:
        self.examined += 1
        shape = job.shape()
        if shape in self.never:
            self._infeasible(job, self.never[shape])
            return
        mode: Mode | None = None
        if self.quota is not None:
            beyond = self.quota.out_of_reach(job)
            if beyond is not None:  # more than its VC may ever use: infeasible, as NeverFits
                self._infeasible(job, beyond)
                return
            head = self.strict_heads.get(job.virtual_cluster)
            if head is not None:
                self._pend(job, _behind_head(job, head))
                return
            verdict = self.quota.classify(job)
            if isinstance(verdict, PendingReason):
                self._pend(job, verdict)
                return
            mode = verdict
        if mode is Mode.RECLAIM_WITHIN:  # quota says: not before lower classes make way
            reclaimed = self._preempt_for(job, guaranteed=False)
            self._pend(job, reclaimed or self._over_quota(job))
            return
        reason = self.blocked.get(shape)
        if reason is None:
            reason = self._try(job, shape)
            if reason is None:
                return
        if mode is not None:
            reason = self._after_failure(job, mode, reason)
        self._pend(job, reason)

    def _try(self, job: JobRequest, shape: tuple[object, ...]) -> PendingReason | None:
        if not self.pool.active:
            reason = PendingReason(
                ReasonCode.NO_SCHEDULABLE_NODES, "no schedulable node is registered"
            )
            self.blocked[shape] = reason
            return reason
        self.placements_tried += 1
        result = self.pool.place_job(job)
        if not isinstance(result, PlacementFailure):
            self._admit(job, result)
            return None
        verdict = self.never_fits_check(job)
        if verdict is not None:
            self.never[shape] = verdict
            self._infeasible(job, verdict)
            return None
        reason = explain(self.pool, job, result)
        holder = next((h for h in self.pool.reserved_by if h is not None), None)
        if holder is not None:
            reason = PendingReason(
                reason.code, f"{reason.message} (some room is held for job {holder}, ahead of it)"
            )
        self.blocked[shape] = reason
        return reason

    def _gone_ahead(self, job: JobRequest) -> None:
        bisect.insort(self._gone.setdefault(self._queue_of(job), []), queue_key(job))

    def _queue_of(self, job: JobRequest) -> str:
        return job.virtual_cluster if self.quota is not None else ""

    def _infeasible(self, job: JobRequest, reason: PendingReason) -> None:
        self._gone_ahead(job)
        self.infeasible.append(InfeasibleJob(job.job_id, reason))

    def _admit(self, job: JobRequest, placements: list[TaskPlacement]) -> None:
        self._gone_ahead(job)
        self.admissions.append(Admission(job.job_id, tuple(placements)))
        if self.quota is not None:
            self.quota.admit(job)
        self.admitted_allocations.extend(allocation_for(job, p) for p in placements)

    def _after_failure(self, job: JobRequest, mode: Mode, reason: PendingReason) -> PendingReason:
        """With VCs: make room by preemption if entitled; else reserve room if it heads its VC."""
        assert self.quota is not None
        if mode is Mode.BORROWING and self.quota.relief_within(job):
            reclaimed = self._preempt_for(job, guaranteed=False)
            if reclaimed is not None:
                return reclaimed
        if mode is not Mode.GUARANTEED and len(self.quota.vcs) == 1:
            return reason  # one VC: "past its guarantee" just means the cluster is full
        if mode is not Mode.GUARANTEED:
            return PendingReason(
                ReasonCode.NO_IDLE_CAPACITY,
                f"virtual cluster {job.virtual_cluster} is past its guarantee, so this job may "
                f"only use idle capacity, and there is not enough: {reason.message}"
                if mode is Mode.BORROWING
                else f"oppo jobs run only on idle capacity, and there is not enough: "
                f"{reason.message}",
            )
        room = self._simulate(job, self.terminating | self.taken)
        if room is not None:  # jobs already stopping will make room: wait for them
            self.pool.reserve(room, job.job_id)
            return PendingReason(
                ReasonCode.WAITING_FOR_PREEMPTION,
                f"waiting for stopping tasks to exit; then it fits ({reason.message})",
            )
        preempted = self._preempt_for(job, guaranteed=True)
        if preempted is not None:
            return preempted
        self._reserve_head(job)
        return reason

    def _over_quota(self, job: JobRequest) -> PendingReason:
        assert self.quota is not None
        return PendingReason(
            ReasonCode.OVER_QUOTA,
            f"virtual cluster {job.virtual_cluster} has no quota left for it, and preempting "
            "the lower priority jobs of the VC would not make enough room",
        )

    def _preempt_for(self, job: JobRequest, guaranteed: bool) -> PendingReason | None:
        quota = self.quota
        assert quota is not None
        # Nothing a cycle does makes preemption easier later in it (admissions use room, chosen
        # victims leave the candidates), so a class of job that found no relief finds none again.
        key = (job.virtual_cluster, job.priority, job.user, job.shape(), guaranteed)
        if key in self._no_relief:
            return None
        candidates = self._candidates(job, guaranteed)
        first = self._fewest_worth_trying(job, candidates)
        if first is None:
            self._no_relief.add(key)
            return None
        by_id = self._running_by_id
        assert by_id is not None  # made by _candidates

        def fits(free: frozenset[str]) -> bool:
            if not quota.room_after(job, (by_id[j] for j in free if j in by_id)):
                return False
            if self.what_ifs_run >= self.budget.what_ifs:
                raise _WhatIfsSpent
            return self._simulate(job, free) is not None

        try:
            victims = choose_victims(
                candidates, frozenset(self.terminating | self.taken), fits, first
            )
        except _WhatIfsSpent:
            return None  # not decided this cycle; the next one tries again
        if victims is None:
            self._no_relief.add(key)
            return None
        for victim in victims:
            self.taken.add(victim.job_id)
            self.preemptions.append(
                Preemption(victim.job_id, job.job_id, describe_victim(victim, job))
            )
        room = self._simulate(job, self.terminating | self.taken)
        if room is not None:
            self.pool.reserve(room, job.job_id)
        names = ", ".join(v.job_id for v in victims)
        return PendingReason(
            ReasonCode.WAITING_FOR_PREEMPTION,
            f"preempting job(s) {names} to make room; it starts when they have stopped",
        )

    def _candidates(self, job: JobRequest, guaranteed: bool) -> list[RunningJob]:
        """Who may be preempted for ``job``, in preference order; the same for every job of a
        VC and priority, so found once per cycle (less the victims taken since)."""
        assert self.quota is not None
        key = (job.virtual_cluster, job.priority, guaranteed)
        found = self._eligible.get(key)
        if found is None:
            vc = self.quota.vcs.get(job.virtual_cluster)
            found = eligible_victims(job, guaranteed, self.quota.running, self.inside, vc, set())
            self._eligible[key] = found
        if self._running_by_id is None:
            self._running_by_id = {r.job_id: r for r in self.quota.running}
        if self.taken or job.job_id in self._running_by_id:
            skip = self.taken | {job.job_id}
            return [c for c in found if c.job_id not in skip]
        return found

    def _fewest_worth_trying(self, job: JobRequest, candidates: list[RunningJob]) -> int | None:
        """How many of ``candidates`` (taken in order) at least must stop before the job could
        fit: counted on GPUs and on its VC's quota, without placing (None: not even all)."""
        assert self.quota is not None
        if not candidates:
            return None
        self._enough_gpus_after(job, frozenset())  # computes the GPU room
        assert self._gpu_room is not None
        free, by_job = self._gpu_room
        free -= sum(a.resources.gpu for a in self.admitted_allocations)
        free += sum(by_job.get(j, 0) for j in self.terminating | self.taken)
        vc = self.quota.vcs[job.virtual_cluster]
        limit = vc.guarantee if vc.borrow_limit is None else vc.guarantee + vc.borrow_limit
        usage = self.quota.usage[vc.name] + job.total
        cpu, memory, gpu = usage.cpu_millis, usage.memory_mib, usage.gpu
        for count, victim in enumerate(candidates, start=1):
            free += by_job.get(victim.job_id, 0)
            if victim.virtual_cluster == vc.name and not victim.opportunistic:
                cpu -= victim.usage.cpu_millis
                memory -= victim.usage.memory_mib
                gpu -= victim.usage.gpu
            if (
                job.total.gpu <= free
                and cpu <= limit.cpu_millis
                and memory <= limit.memory_mib
                and gpu <= limit.gpu
            ):
                return count
        return None

    def _simulate(self, job: JobRequest, freed: frozenset[str]) -> list[TaskPlacement] | None:
        """Where ``job`` would go if the jobs in ``freed`` released their resources."""
        if not freed or not self._enough_gpus_after(job, freed):
            return None
        key = (freed, len(self.admitted_allocations), job.shape())
        # Before any admission the answer depends only on the snapshot's nodes and allocations,
        # so it is kept across cycles while those stay the same objects (SchedulerCache).
        memo = self._simulated if self.admitted_allocations else self._kept_what_ifs
        if key not in memo:  # victim search asks about the same sets again
            if self.what_ifs_run >= self.budget.what_ifs:
                return None  # budget spent: treated as "would not fit" for the rest of the cycle
            self.what_ifs_run += 1
            result = self._what_if_pool(freed).place_job(job, commit=False)
            memo[key] = None if isinstance(result, PlacementFailure) else result
        return memo[key]

    def _what_if_pool(self, freed: frozenset[str]) -> NodePool:
        """The pool of the snapshot's allocations less those of ``freed`` plus this cycle's
        admissions: the cycle's starting state with the differences applied, O(nodes)."""
        layout = self.cache.layouts.layout_for(self.snapshot.nodes, False, None)
        base = layout.state_for(self.snapshot.allocations)  # kept: the cycle's own start
        if self._by_job is None:
            self._by_job = {}
            for alloc in self.snapshot.allocations:
                self._by_job.setdefault(alloc.job_id, []).append(alloc)
        removed = [a for job_id in freed for a in self._by_job.get(job_id, ())]
        return NodePool.on_state(layout, layout.derive(base, removed, self.admitted_allocations))

    def _enough_gpus_after(self, job: JobRequest, freed: frozenset[str]) -> bool:
        """A necessary condition, counted without placing: the schedulable nodes would have
        as many free GPUs as the job needs once ``freed`` stop (the victim search grows its set
        one job at a time, so most sets it tries are simply too small)."""
        if self._gpu_room is None:
            schedulable = {n.name for n in self.snapshot.nodes if n.schedulable}
            free = sum(n.capacity.gpu for n in self.snapshot.nodes if n.schedulable)
            by_job: dict[str, int] = {}
            for alloc in self.snapshot.allocations:
                if alloc.resources.gpu and alloc.node in schedulable:
                    by_job[alloc.job_id] = by_job.get(alloc.job_id, 0) + alloc.resources.gpu
                    free -= alloc.resources.gpu
            self._gpu_room = (free, by_job)
        free, by_job = self._gpu_room
        admitted = sum(a.resources.gpu for a in self.admitted_allocations)
        return job.total.gpu <= free - admitted + sum(by_job.get(j, 0) for j in freed)

    def _reserve_head(self, job: JobRequest) -> None:
        """The first blocked job of a VC keeps the nodes it will use; others backfill around."""
        if job.virtual_cluster in self.reserved_vcs or job.opportunistic:
            return
        self.reserved_vcs.add(job.virtual_cluster)
        if self._head_layout is None:  # nodes with the most free now first; ranked once a cycle
            prefer = {
                self.pool.nodes[i].name: -(
                    len(self.pool.free_gpus[i]) * 10**9 + self.pool.free_cpu[i]
                )
                for i in self.pool.active
            }
            self._head_layout = Layout(self.snapshot.nodes, False, prefer, keep=1)
        idle = NodePool.on_state(self._head_layout, self._head_layout.empty)
        result = idle.place_job(job, commit=False)
        if not isinstance(result, PlacementFailure):
            self.pool.reserve(result, job.job_id)

    def _pend(self, job: JobRequest, reason: PendingReason) -> None:
        if job.virtual_cluster in self.strict_vcs:
            self.strict_heads.setdefault(job.virtual_cluster, job.job_id)
        self._waiting.append((job, reason))

    def pending_jobs(self, whole_queue: bool = False) -> list[PendingJob]:
        """The waiting jobs examined, each with its place in its queue once this cycle's
        admissions have left it (jobs found infeasible do not count either). With
        ``whole_queue`` every queued job was examined: one pass over the queue counts them."""
        if whole_queue:
            return self._counted_positions()
        found = []
        for job, reason in self._waiting:
            position = self.cache.queues.position(job) or 0
            gone = self._gone.get(self._queue_of(job), ())
            found.append(
                PendingJob(job.job_id, reason, position - bisect.bisect_left(gone, queue_key(job)))
            )
        return found

    def _counted_positions(self) -> list[PendingJob]:
        reasons = {job.job_id: reason for job, reason in self._waiting}
        positions: dict[str, int] = {}
        for queue in self.cache.queues.by_vc.values():
            count = 0
            for job in queue.jobs:
                if job.job_id in reasons:
                    count += 1
                    positions[job.job_id] = count
        return [PendingJob(job.job_id, r, positions[job.job_id]) for job, r in self._waiting]
