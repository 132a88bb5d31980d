"""``schedule(snapshot, now) -> Plan``: the one scheduling function the server, the simulator,
dry runs and tests all call. Pure: no I/O, no clock (``now`` is an argument), no randomness.

A caller that schedules again and again passes its own ``SchedulerCache`` (work saved between
cycles, never a different decision), a ``Budget`` (how much one cycle may do) and the previous
plan's ``resume_from`` (where the backfill sweep goes on). Without them a call examines the whole
queue from scratch: the unbounded cycle, which the bounded one equals whenever its budget is not
spent (tests/core/test_bounded_cycle.py).

Policy (see docs/scheduling.md): jobs in priority order, then submission time, then id; each job
is placed as a whole gang or not at all; a job that does not fit waits with a reason and later,
smaller jobs may still start (best-effort FIFO). A job that could not run even on an idle cluster
is reported infeasible rather than left to wait forever, and so is one asking more than its
virtual cluster may ever use (guarantee plus borrowing limit, or the per-user GPU cap). With
virtual clusters, quotas decide who may use what, jobs inside their guarantee may preempt
borrowers, and each VC's first blocked job keeps a reservation (core/cycle.py).
"""

from __future__ import annotations

from shoal.core.budget import UNBOUNDED, Budget
from shoal.core.cache import SchedulerCache
from shoal.core.cycle import Cycle
from shoal.core.diagnosis import explain, never_fits
from shoal.core.feasibility import could_fit
from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import PendingReason, Plan
from shoal.core.queueindex import QueueKey, queue_key
from shoal.core.snapshot import ClusterSnapshot, JobRequest
from shoal.core.window import Window, select_window


class _Feasibility:
    """Answers "could this job ever fit?" on an idle copy of the cluster, once per job shape."""

    def __init__(self, snapshot: ClusterSnapshot, cache: SchedulerCache) -> None:
        self._snapshot = snapshot
        self._cache = cache
        self._pool: NodePool | None = None
        self._verdicts = cache.never_fits_verdicts(snapshot)

    def never_fits(self, job: JobRequest) -> PendingReason | None:
        shape = job.shape()
        if shape not in self._verdicts:
            if self._pool is None:
                self._pool = NodePool(
                    self._snapshot.nodes, include_unschedulable=True, layouts=self._cache.layouts
                )
            result = self._pool.place_job(job, commit=False)
            verdict = None
            if isinstance(result, PlacementFailure) and _provably_never(
                self._pool, self._snapshot, job
            ):
                verdict = never_fits(explain(self._pool, job, result))
            self._verdicts[shape] = verdict
        return self._verdicts[shape]


def _provably_never(pool: NodePool, snapshot: ClusterSnapshot, job: JobRequest) -> bool:
    """Whether a job that greedy placement could not fit on the idle cluster surely never fits.

    For one role (identical tasks) greedy placement is exact. For several roles it is not: the job
    is infeasible when a necessary condition fails (some role alone does not fit, or the job needs
    more cpu, memory, GPUs or ports than the cluster has) or a bounded exhaustive search finds no
    placement. If the search cannot decide in its budget, the job waits rather than be rejected.
    """
    if len(job.roles) == 1 or _lacks_capacity(pool, job):
        return True
    return could_fit(snapshot.nodes, job) is False


def _lacks_capacity(pool: NodePool, job: JobRequest) -> bool:
    if any(pool.capacity_count(role) < role.instances for role in job.roles):
        return True
    need = job.total
    have_cpu = sum(pool.free_cpu[i] for i in pool.active)
    have_memory = sum(pool.free_memory[i] for i in pool.active)
    have_gpu = sum(len(pool.free_gpus[i]) for i in pool.active)
    need_ports = sum(r.instances * sum(c for _, c in r.ports) for r in job.roles)
    have_ports = sum(pool.free_ports(i) for i in pool.active)
    return (
        need.cpu_millis > have_cpu
        or need.memory_mib > have_memory
        or need.gpu > have_gpu
        or need_ports > have_ports
    )


def schedule(
    snapshot: ClusterSnapshot,
    now: float,
    *,
    cache: SchedulerCache | None = None,
    budget: Budget = UNBOUNDED,
    resume_from: QueueKey | None = None,
) -> Plan:
    """Decide which queued jobs start now and where; explain every examined job that does not."""
    del now  # part of the contract; used by time-aware policies (aging)
    cache = cache if cache is not None else SchedulerCache()
    cache.queues.sync(snapshot.queue, per_vc=bool(snapshot.virtual_clusters))
    strict = {vc.name for vc in snapshot.virtual_clusters if vc.strict_fifo}
    window = select_window(cache.queues, budget, resume_from, strict)
    feasibility = _Feasibility(snapshot, cache)
    cycle = Cycle(snapshot, feasibility.never_fits, cache, budget)
    examined: set[str] = set()
    track = bool(window.backfill)  # only a backfill slice needs to know what was examined
    for job in cycle.order(window.jobs):
        if (
            window.mandatory is not None
            and cycle.stop_early()
            and job.job_id not in window.mandatory
        ):
            continue
        if track:
            examined.add(job.job_id)
        cycle.consider(job)
    return Plan(
        tuple(cycle.admissions),
        tuple(cycle.pending_jobs(whole_queue=window.mandatory is None)),
        tuple(cycle.infeasible),
        tuple(cycle.preemptions),
        _resume_point(window, examined),
        cycle.examined,
        cycle.stopped_by,
    )


def _resume_point(window: Window, examined: set[str]) -> QueueKey | None:
    """The first backfill job this cycle skipped, else the first job past the window."""
    for job in window.backfill:
        if job.job_id not in examined:
            return queue_key(job)
    return window.next_key
