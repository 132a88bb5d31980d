"""Virtual-cluster quota arithmetic: who uses what, which running jobs are inside their VC's
guarantee, and whether a new job may be admitted as guaranteed, as borrowing, or not at all.

A running job is *inside the guarantee* when, taking its VC's running jobs in queue order
(priority, then submission time), the job still fits in what the guarantee has left. Every other
running job of that VC is *borrowing*. Only borrowing and `oppo` jobs can be preempted by another
VC, so a job inside its guarantee is never preempted by another VC.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from shoal.core.plan import PendingReason, ReasonCode
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import JobRequest, NodeState, TaskAllocation, VirtualCluster
from shoal.core.usage import UsageMemo, node_gpu_types, usage_of


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    virtual_cluster: str
    priority: int
    submitted_at: float
    user: str
    usage: ResourceVector
    terminating: bool
    typed_gpus: tuple[tuple[str, int], ...] = ()  # GPUs held, by the GPU type of their node

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0


def running_jobs(
    allocations: Iterable[TaskAllocation], node_types: Mapping[str, str | None] | None = None
) -> list[RunningJob]:
    """Tasks grouped into jobs with their summed usage, in queue order (hot: runs every cycle,
    so sums are kept as plain integers and turned into vectors once per job)."""
    types = node_types or {}
    sums: dict[str, list[int]] = {}
    firsts: dict[str, TaskAllocation] = {}
    all_terminating: dict[str, bool] = {}
    typed: dict[str, dict[str, int]] = {}
    for alloc in allocations:
        job_id = alloc.job_id
        total = sums.get(job_id)
        if total is None:
            total = sums[job_id] = [0, 0, 0]
            firsts[job_id] = alloc
            all_terminating[job_id] = alloc.terminating
        elif not alloc.terminating:
            all_terminating[job_id] = False
        resources = alloc.resources
        total[0] += resources.cpu_millis
        total[1] += resources.memory_mib
        if resources.gpu:
            total[2] += resources.gpu
            gpu_type = types.get(alloc.node)
            if gpu_type is not None:
                by_type = typed.setdefault(job_id, {})
                by_type[gpu_type] = by_type.get(gpu_type, 0) + resources.gpu
    jobs = []
    for job_id, (cpu, memory, gpu) in sums.items():
        first = firsts[job_id]
        jobs.append(
            RunningJob(
                job_id,
                first.virtual_cluster,
                first.priority,
                first.submitted_at,
                first.user,
                ResourceVector(cpu, memory, gpu),
                all_terminating[job_id],
                tuple(sorted(typed.get(job_id, {}).items())),
            )
        )
    return sorted(jobs, key=lambda j: (-j.priority, j.submitted_at, j.job_id))


def _order(job: RunningJob) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.job_id)


def memo_running_jobs(memo: UsageMemo, types: Mapping[str, str | None]) -> list[RunningJob]:
    """``running_jobs`` of the memo's allocations, regrouping only the jobs that changed."""
    if memo.by_job is None:
        memo.by_job = {}
        for alloc in memo.allocations:
            memo.by_job.setdefault(alloc.job_id, []).append(alloc)
        memo.running = {job.job_id: job for job in running_jobs(memo.allocations, types)}
        memo.running_order = sorted((_order(j), j.job_id) for j in memo.running.values())
        memo.dirty_jobs.clear()
    for job_id in memo.dirty_jobs:
        before = memo.running.pop(job_id, None)
        if before is not None:
            key = (_order(before), job_id)
            del memo.running_order[bisect.bisect_left(memo.running_order, key)]
        held = memo.by_job.get(job_id)
        if held:
            (job,) = running_jobs(held, types)
            memo.running[job_id] = job
            bisect.insort(memo.running_order, (_order(job), job_id))
        else:
            memo.by_job.pop(job_id, None)
    memo.dirty_jobs.clear()
    return [memo.running[job_id] for _, job_id in memo.running_order]


class Admission(StrEnum):
    GUARANTEED = "guaranteed"  # fits in the VC's guarantee
    BORROWING = "borrowing"  # past the guarantee, within the borrowing limit: idle capacity
    RECLAIM_WITHIN = "reclaim-within"  # only after lower classes of its own VC make way
    OPPORTUNISTIC = "opportunistic"


def _fits(amount: ResourceVector, limit: ResourceVector) -> bool:
    return amount.fits_in(limit)


class QuotaLedger:
    """Usage per VC and per user, updated as the cycle admits jobs.

    Built once per cycle, so it sums usage straight from the task allocations and groups them
    into running jobs only when a cycle asks (preemption needs them; most cycles do not)."""

    def __init__(self, vcs: Sequence[VirtualCluster], running: Sequence[RunningJob]) -> None:
        self._start(vcs)
        self._running: list[RunningJob] | None = list(running)
        for job in running:
            if not job.opportunistic:
                self._count(job.virtual_cluster, job.user, job.usage, job.typed_gpus)

    @classmethod
    def from_allocations(
        cls,
        vcs: Sequence[VirtualCluster],
        nodes: tuple[NodeState, ...],
        allocations: Sequence[TaskAllocation],
        memo: UsageMemo | None = None,
    ) -> QuotaLedger:
        ledger = cls.__new__(cls)
        ledger._start(vcs)
        ledger._running = None
        ledger._allocations = allocations
        ledger._node_types = node_gpu_types(nodes, memo)
        ledger._memo = memo
        usage = usage_of(nodes, allocations, memo)
        for vc_name, (cpu, memory, gpu) in usage.by_vc.items():
            ledger.usage[vc_name] = ResourceVector(cpu, memory, gpu)
        ledger.user_gpus = usage.user_gpus
        ledger.typed = usage.typed
        ledger._by_priority = usage.by_priority
        return ledger

    def _start(self, vcs: Sequence[VirtualCluster]) -> None:
        self.vcs = {vc.name: vc for vc in vcs}
        self.usage: dict[str, ResourceVector] = {name: ResourceVector() for name in self.vcs}
        self.user_gpus: dict[tuple[str, str], int] = {}
        self.typed: dict[tuple[str, str], int] = {}
        self._lower_cache: dict[tuple[str, int], ResourceVector] = {}
        self._allocations: Sequence[TaskAllocation] = ()
        self._memo: UsageMemo | None = None
        self._node_types: Mapping[str, str | None] = {}
        self._by_priority: dict[tuple[str, int], list[int]] | None = None
        self._verdicts: dict[tuple[object, ...], Admission | PendingReason] = {}
        # the most each VC may ever use (None: any idle capacity), for ``out_of_reach``
        self._most = {
            vc.name: None if vc.borrow_limit is None else vc.guarantee + vc.borrow_limit
            for vc in vcs
        }

    @property
    def running(self) -> list[RunningJob]:
        """The running jobs in queue order (grouped from the allocations on first use; with a
        memo, only the jobs whose tasks changed since the memo's last cycle are regrouped)."""
        if self._running is None:
            memo = self._memo
            if memo is not None and memo.allocations is self._allocations:
                self._running = memo_running_jobs(memo, self._node_types)
            else:
                self._running = running_jobs(self._allocations, self._node_types)
        return self._running

    def _count(
        self, vc: str, user: str, usage: ResourceVector, typed: Iterable[tuple[str, int]] = ()
    ) -> None:
        self.usage[vc] = self.usage.get(vc, ResourceVector()) + usage
        key = (vc, user)
        self.user_gpus[key] = self.user_gpus.get(key, 0) + usage.gpu
        for gpu_type, count in typed:
            self.typed[(vc, gpu_type)] = self.typed.get((vc, gpu_type), 0) + count

    def admit(self, job: JobRequest) -> None:
        self._verdicts.clear()  # usage changes: earlier answers may not hold
        if not job.opportunistic:
            self._count(job.virtual_cluster, job.user, job.total, typed_need(job).items())

    def _typed_fits(self, vc: VirtualCluster, job: JobRequest) -> bool:
        """Inside the per-type GPU guarantees (a VC without them puts no limit on types)."""
        if not vc.gpu_by_type:
            return True
        limits = dict(vc.gpu_by_type)
        return all(
            self.typed.get((vc.name, gpu_type), 0) + count <= limits.get(gpu_type, 0)
            for gpu_type, count in typed_need(job).items()
        )

    def out_of_reach(self, job: JobRequest) -> PendingReason | None:
        """Why the job could never be admitted in its VC (``beyond_reach``), None if it could
        (or its VC does not exist: that wait has a reason of its own)."""
        vc = self.vcs.get(job.virtual_cluster)
        if vc is None or job.opportunistic:
            return None
        most = self._most[vc.name]
        need = job.total
        cap = vc.user_gpu_cap
        if (most is None or need.fits_in(most)) and (cap is None or need.gpu <= cap):
            return None  # the common case, cheaply: every queued job is asked every cycle
        return beyond_reach(vc, job)

    def classify(self, job: JobRequest) -> Admission | PendingReason:
        """How the job may be admitted now. Jobs alike in VC, priority, size, GPU types and
        (under a per-user cap) user get the same answer until the next admission, so the answer
        is remembered: long queues of similar jobs are classified once per cycle, not per job."""
        vc = self.vcs.get(job.virtual_cluster)
        key = (
            job.virtual_cluster,
            job.priority,
            job.total,
            job.user if vc is not None and vc.user_gpu_cap is not None else "",
            job.shape() if vc is not None and vc.gpu_by_type else (),
        )
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._classify(job, vc)
        return verdict

    def _classify(self, job: JobRequest, vc: VirtualCluster | None) -> Admission | PendingReason:
        if vc is None:
            return PendingReason(
                ReasonCode.UNKNOWN_VIRTUAL_CLUSTER,
                f"virtual cluster {job.virtual_cluster!r} does not exist",
            )
        if job.opportunistic:
            return Admission.OPPORTUNISTIC
        need = job.total
        if vc.user_gpu_cap is not None and need.gpu:
            used = self.user_gpus.get((vc.name, job.user), 0)
            if used + need.gpu > vc.user_gpu_cap:
                return PendingReason(
                    ReasonCode.USER_GPU_CAP,
                    f"user {job.user} uses {used} of the {vc.user_gpu_cap}-GPU per-user cap in "
                    f"virtual cluster {vc.name}; this job needs {need.gpu} more",
                )
        after = self.usage[vc.name] + need
        if _fits(after, vc.guarantee) and self._typed_fits(vc, job):
            return Admission.GUARANTEED
        if vc.borrow_limit is None or _fits(after, vc.guarantee + vc.borrow_limit):
            return Admission.BORROWING
        if self.relief_within(job):
            return Admission.RECLAIM_WITHIN
        return PendingReason(
            ReasonCode.OVER_QUOTA,
            f"virtual cluster {vc.name} uses {self.usage[vc.name].describe()} of its guarantee "
            f"{vc.guarantee.describe_limit()} plus borrowing limit "
            f"{vc.borrow_limit.describe_limit()}; this job needs {need.describe()} more",
        )

    def relief_within(self, job: JobRequest) -> bool:
        """Whether preempting lower classes of its own VC would bring the job inside the
        guarantee (when the VC allows that)."""
        vc = self.vcs.get(job.virtual_cluster)
        if vc is None or not vc.preempt_within or job.opportunistic:
            return False
        after = self.usage[vc.name] + job.total
        return _fits(after - self._lower_priority_usage(job), vc.guarantee)

    def room_after(self, job: JobRequest, freed: Iterable[RunningJob]) -> bool:
        """Whether the job's VC stays within guarantee plus borrowing limit once ``freed`` go."""
        vc = self.vcs[job.virtual_cluster]
        usage = self.usage[vc.name] + job.total
        for other in freed:
            if other.virtual_cluster == vc.name and not other.opportunistic:
                usage = usage - other.usage
        limit = vc.guarantee if vc.borrow_limit is None else vc.guarantee + vc.borrow_limit
        return _fits(usage, limit)

    def _lower_priority_usage(self, job: JobRequest) -> ResourceVector:
        key = (job.virtual_cluster, job.priority)
        if key not in self._lower_cache:  # running jobs do not change during a cycle
            self._lower_cache[key] = self._sum_lower(job)
        return self._lower_cache[key]

    def _sum_lower(self, job: JobRequest) -> ResourceVector:
        """What the VC's running tasks of lower priority (and not stopping) hold."""
        if self._by_priority is not None:  # summed with the usage: no pass over the jobs
            cpu = memory = gpu = 0
            for (vc_name, priority), held in self._by_priority.items():
                if vc_name == job.virtual_cluster and priority < job.priority:
                    cpu, memory, gpu = cpu + held[0], memory + held[1], gpu + held[2]
            return ResourceVector(cpu, memory, gpu)
        total = ResourceVector()
        for other in self.running:
            if (
                other.virtual_cluster == job.virtual_cluster
                and not other.opportunistic
                and not other.terminating
                and other.priority < job.priority
            ):
                total = total + other.usage
        return total

    def inside_guarantee(self) -> set[str]:
        """Running jobs that the guarantee of their VC covers (see the module docstring)."""
        inside: set[str] = set()
        left = {
            name: [vc.guarantee.cpu_millis, vc.guarantee.memory_mib, vc.guarantee.gpu]
            for name, vc in self.vcs.items()
        }
        typed_left = {(name, t): n for name, vc in self.vcs.items() for t, n in vc.gpu_by_type}
        for job in self.running:  # already in queue order
            room = left.get(job.virtual_cluster)
            if room is None or job.opportunistic:
                continue
            vc = self.vcs[job.virtual_cluster]
            typed_ok = not vc.gpu_by_type or all(
                count <= typed_left.get((vc.name, t), 0) for t, count in job.typed_gpus
            )
            usage = job.usage
            if (
                usage.cpu_millis <= room[0]
                and usage.memory_mib <= room[1]
                and usage.gpu <= room[2]
                and typed_ok
            ):
                inside.add(job.job_id)
                room[0] -= usage.cpu_millis
                room[1] -= usage.memory_mib
                room[2] -= usage.gpu
                for t, count in job.typed_gpus:
                    key = (vc.name, t)
                    typed_left[key] = typed_left.get(key, 0) - count
        return inside


def beyond_reach(vc: VirtualCluster, job: JobRequest) -> PendingReason | None:
    """Why ``job`` could never be admitted in ``vc``, whatever else runs (None: it could): it
    asks more GPUs than the per-user cap, or more of a resource than the guarantee plus the
    borrowing limit. `oppo` jobs count against neither, so they are never beyond reach."""
    if job.opportunistic:
        return None
    need = job.total
    cap = vc.user_gpu_cap
    if cap is not None and need.gpu > cap:
        return PendingReason(
            ReasonCode.EXCEEDS_USER_GPU_CAP,
            f"this job needs {need.gpu} GPUs, more than the {cap}-GPU per-user cap of virtual "
            f"cluster {vc.name}, so it could never start there; ask for at most {cap} GPUs, "
            "submit it to another virtual cluster, or ask an admin to raise the cap "
            f"(shoal vc update {vc.name} --user-gpu-cap {need.gpu})",
        )
    if vc.borrow_limit is None:
        return None  # may borrow any idle capacity: only the cluster's size bounds it
    most = vc.guarantee + vc.borrow_limit
    over = [
        (name, n, g, b, m)
        for name, n, g, b, m in zip(
            ("cpu", "memory", "gpu"),
            (need.cpu_millis, need.memory_mib, need.gpu),
            (vc.guarantee.cpu_millis, vc.guarantee.memory_mib, vc.guarantee.gpu),
            (vc.borrow_limit.cpu_millis, vc.borrow_limit.memory_mib, vc.borrow_limit.gpu),
            (most.cpu_millis, most.memory_mib, most.gpu),
            strict=True,
        )
        if n > m
    ]
    if not over:
        return None
    limits = "; ".join(
        f"{_amount(name, n)} asked, at most {_amount(name, m)} (guarantee {_amount(name, g)} "
        f"plus borrowing limit {_amount(name, b)})"
        for name, n, g, b, m in over
    )
    raise_to = ",".join(f"{name}={_setting(name, n - g)}" for name, n, g, _, _ in over)
    return PendingReason(
        ReasonCode.EXCEEDS_VC_LIMIT,
        f"this job needs more than virtual cluster {vc.name} may ever use ({limits}), so it "
        "could never start there; make it smaller, submit it to another virtual cluster, or "
        f"ask an admin to raise the limit (shoal vc update {vc.name} --borrow-limit {raise_to})",
    )


def _amount(name: str, value: int) -> str:
    if name == "cpu":
        return f"{value / 1000:g} cpu"
    return f"{value} MiB of memory" if name == "memory" else f"{value} GPU"


def _setting(name: str, value: int) -> str:
    """An amount as ``shoal vc update --borrow-limit`` takes it."""
    if name == "cpu":
        return f"{value / 1000:g}"
    return f"{value}Mi" if name == "memory" else str(value)


def typed_need(job: JobRequest) -> dict[str, int]:
    """GPUs the job asks for by GPU type (roles that name one)."""
    need: dict[str, int] = {}
    for role in job.roles:
        if role.gpu_type is not None and role.per_instance.gpu:
            need[role.gpu_type] = (
                need.get(role.gpu_type, 0) + role.per_instance.gpu * role.instances
            )
    return need


# A guarantee per resource (cpu millicores, memory MiB, GPUs); None: that resource is not limited.
Guarantee = tuple[int | None, int | None, int | None]


@dataclass(frozen=True, slots=True)
class Sharing:
    """A VC's use beyond its guarantee (``borrowed``) and the part of its idle guarantee that
    other VCs' borrowing takes up (``lent``)."""

    borrowed: ResourceVector
    lent: ResourceVector


def sharing(
    guarantees: Mapping[str, Guarantee], used: Mapping[str, ResourceVector]
) -> dict[str, Sharing]:
    """Per VC and per resource: borrowed = use beyond the guarantee; lent = the VC's part of
    everything borrowed, in proportion to its idle guarantee (guarantee less use), since idle
    guarantees form one pool that borrowers draw on, not a loan from one VC. What is lent adds
    up to what is borrowed (at most to what is idle). A resource a VC does not limit is neither
    borrowed nor lent by it."""
    borrowed: dict[str, list[int]] = {}
    idle: dict[str, list[int]] = {}
    for name, guarantee in guarantees.items():
        use = used.get(name, ResourceVector())
        pairs = list(zip(guarantee, (use.cpu_millis, use.memory_mib, use.gpu), strict=True))
        borrowed[name] = [0 if g is None else max(0, u - g) for g, u in pairs]
        idle[name] = [0 if g is None else max(0, g - u) for g, u in pairs]
    lent: dict[str, list[int]] = {name: [0, 0, 0] for name in guarantees}
    for d in range(3):
        total = sum(b[d] for b in borrowed.values())
        shares = apportion(total, {name: i[d] for name, i in idle.items()})
        for name, share in shares.items():
            lent[name][d] = share
    return {
        name: Sharing(ResourceVector(*borrowed[name]), ResourceVector(*lent[name]))
        for name in guarantees
    }


def apportion(amount: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``amount`` (at most the sum of ``weights``) split in whole units in proportion to the
    weights: each gets its share rounded down, and the units left go to the largest remainders
    (ties: by name), so the parts add up to the amount."""
    weight = sum(weights.values())
    amount = min(amount, weight)
    if amount <= 0:
        return dict.fromkeys(weights, 0)
    parts = {name: w * amount // weight for name, w in weights.items()}
    left = amount - sum(parts.values())
    by_remainder = sorted(weights, key=lambda name: (-(weights[name] * amount % weight), name))
    for name in by_remainder[:left]:
        parts[name] += 1
    return parts
