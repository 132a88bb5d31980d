"""One scheduling cycle: jobs in queue order, each admitted whole, left waiting with a reason,
reported infeasible, or (with virtual clusters) given room by preempting jobs it is entitled to
displace. With virtual clusters, the first blocked job of each VC also keeps a reservation, so
later jobs backfill only around it and never delay it.
"""

from __future__ import annotations

from collections.abc import Callable

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
from shoal.core.preemption import choose_victims, describe_victim, eligible_victims
from shoal.core.quota import Admission as Mode
from shoal.core.quota import QuotaLedger
from shoal.core.snapshot import ClusterSnapshot, JobRequest, TaskAllocation, allocation_for

NeverFits = Callable[[JobRequest], PendingReason | None]


def _queue_key(job: JobRequest) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.job_id)


def _behind_head(job: JobRequest, head: str) -> PendingReason:
    return PendingReason(
        ReasonCode.RESERVED_FOR_HEAD,
        f"virtual cluster {job.virtual_cluster} runs its jobs in strict FIFO order, and job "
        f"{head}, ahead of this one, is still waiting",
    )


class Cycle:
    def __init__(self, snapshot: ClusterSnapshot, never_fits: NeverFits) -> None:
        self.snapshot = snapshot
        self.never_fits_check = never_fits
        self.pool = NodePool(snapshot.nodes, snapshot.allocations)
        if snapshot.virtual_clusters:
            self.quota: QuotaLedger | None = QuotaLedger.from_allocations(
                snapshot.virtual_clusters, snapshot.nodes, snapshot.allocations
            )
        else:  # no quotas: only the jobs being stopped matter
            self.quota = None
        self._inside: set[str] | None = None
        self._simulated: dict[tuple[object, ...], list[TaskPlacement] | None] = {}
        self._gpu_room: tuple[int, dict[str, int]] | None = None
        self.terminating = frozenset(a.job_id for a in snapshot.allocations if a.terminating)
        self.taken: set[str] = set()  # victims chosen in this cycle
        self.admitted_allocations: list[TaskAllocation] = []
        self.reserved_vcs: set[str] = set()
        # Nothing is freed during a cycle, so a shape that did not fit cannot fit later in it.
        self.blocked: dict[tuple[object, ...], PendingReason] = {}
        self.never: dict[tuple[object, ...], PendingReason] = {}
        self.admissions: list[Admission] = []
        self.pending: list[PendingJob] = []
        self.infeasible: list[InfeasibleJob] = []
        self.preemptions: list[Preemption] = []
        self._positions: dict[str, int] = {}
        # Strict-FIFO VCs: the first waiting job of each, which every later job waits behind.
        self.strict_vcs = {vc.name for vc in snapshot.virtual_clusters if vc.strict_fifo}
        self.strict_heads: dict[str, str] = {}

    @property
    def inside(self) -> set[str]:
        """Running jobs inside their VC's guarantee: computed when preemption first asks."""
        if self._inside is None:
            self._inside = self.quota.inside_guarantee() if self.quota is not None else set()
        return self._inside

    def order(self, queue: tuple[JobRequest, ...]) -> list[JobRequest]:
        """Priority, then submission time, then id; with VCs, jobs inside their guarantee come
        before borrowing ones and `oppo` jobs last, so capacity given back by preemption goes to
        the job it was reclaimed for, not back to the borrower that was submitted earlier."""
        if self.quota is None:
            return sorted(queue, key=_queue_key)
        rank = {
            Mode.GUARANTEED: 0,
            Mode.RECLAIM_WITHIN: 0,
            Mode.BORROWING: 1,
            Mode.OPPORTUNISTIC: 2,
        }

        def key(job: JobRequest) -> tuple[int, int, float, str]:
            assert self.quota is not None
            verdict = self.quota.classify(job)
            return (rank.get(verdict, 0) if isinstance(verdict, Mode) else 0, *_queue_key(job))

        return sorted(queue, key=key)

    def consider(self, job: JobRequest) -> None:
        shape = job.shape()
        if shape in self.never:
            self.infeasible.append(InfeasibleJob(job.job_id, self.never[shape]))
            return
        mode: Mode | None = None
        if self.quota is not None:
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
        result = self.pool.place_job(job)
        if not isinstance(result, PlacementFailure):
            self._admit(job, result)
            return None
        verdict = self.never_fits_check(job)
        if verdict is not None:
            self.never[shape] = verdict
            self.infeasible.append(InfeasibleJob(job.job_id, verdict))
            return None
        reason = explain(self.pool, job, result)
        holder = next((h for h in self.pool.reserved_by if h is not None), None)
        if holder is not None:
            reason = PendingReason(
                reason.code, f"{reason.message} (some room is held for job {holder}, ahead of it)"
            )
        self.blocked[shape] = reason
        return reason

    def _admit(self, job: JobRequest, placements: list[TaskPlacement]) -> None:
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
        vc = quota.vcs.get(job.virtual_cluster)
        candidates = eligible_victims(job, guaranteed, quota.running, self.inside, vc, self.taken)
        if not candidates:
            return None
        already = self.terminating | self.taken
        by_id = {r.job_id: r for r in quota.running}

        def fits(free: frozenset[str]) -> bool:
            if not quota.room_after(job, (by_id[j] for j in free if j in by_id)):
                return False
            return self._simulate(job, free) is not None

        victims = choose_victims(candidates, frozenset(already), fits)
        if victims is None:
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

    def _simulate(self, job: JobRequest, freed: frozenset[str]) -> list[TaskPlacement] | None:
        """Where ``job`` would go if the jobs in ``freed`` released their resources."""
        if not freed or not self._enough_gpus_after(job, freed):
            return None
        key = (freed, len(self.admitted_allocations), job.shape())
        if key not in self._simulated:  # victim search asks about the same sets again
            held = [a for a in self.snapshot.allocations if a.job_id not in freed]
            pool = NodePool(self.snapshot.nodes, held + self.admitted_allocations)
            result = pool.place_job(job, commit=False)
            self._simulated[key] = None if isinstance(result, PlacementFailure) else result
        return self._simulated[key]

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
        prefer = {
            self.pool.nodes[i].name: -(len(self.pool.free_gpus[i]) * 10**9 + self.pool.free_cpu[i])
            for i in self.pool.active
        }
        idle = NodePool(self.snapshot.nodes, prefer=prefer)
        result = idle.place_job(job, commit=False)
        if not isinstance(result, PlacementFailure):
            self.pool.reserve(result, job.job_id)

    def _pend(self, job: JobRequest, reason: PendingReason) -> None:
        if job.virtual_cluster in self.strict_vcs:
            self.strict_heads.setdefault(job.virtual_cluster, job.job_id)
        key = job.virtual_cluster if self.quota is not None else ""
        position = self._positions.get(key, 0) + 1
        self._positions[key] = position
        self.pending.append(PendingJob(job.job_id, reason, position))
