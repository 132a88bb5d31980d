"""Scheduling policies the simulator compares. All of them are the same ``core.schedule``; a
policy only chooses the virtual-cluster rules it runs under and the priority each job has.

- ``fifo``: the YARN capacity-scheduler baseline Philly ran. Each VC gets its guarantee and no
  more (no borrowing), jobs start in strict submission order inside a VC (no backfill), nothing
  is preempted. Priorities in the trace are ignored (YARN queues are FIFO).
- ``shoal``: the production policy. VCs lend idle capacity (borrowing), a VC that needs its
  guarantee back preempts borrowers (reclaim), priority classes order the queue and may preempt
  inside a VC, later jobs backfill around a VC's reserved head, and GPUs are packed best-fit.
- ``las``: Tiresias' discretised two-dimensional least-attained-service (Gu et al., NSDI'19) on
  top of ``shoal``: a job's priority drops as the GPU-seconds it has received cross thresholds, so
  short jobs overtake long ones, and a job that falls behind can be preempted within its VC.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from shoal.core.snapshot import OPPORTUNISTIC, VirtualCluster
from shoal.sim.cluster import SimCluster
from shoal.sim.workload import SimJob

POLICIES = ("fifo", "shoal", "las")
DEFAULT_LAS_THRESHOLDS = (3_600.0, 36_000.0)  # GPU-seconds: 1 and 10 GPU-hours
DEFAULT_PRIORITY = 10  # the `test` class, what a job without one gets


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    borrowing: bool
    preemption: bool
    strict_fifo: bool
    # Attained-service thresholds (GPU-seconds); empty: priorities come from the trace.
    las_thresholds: tuple[float, ...] = ()
    uses_priority: bool = True  # False: every job has the default priority (plain FIFO)

    @property
    def dynamic_priority(self) -> bool:
        return bool(self.las_thresholds)

    def virtual_clusters(self, cluster: SimCluster) -> tuple[VirtualCluster, ...]:
        vcs = cluster.virtual_clusters(
            borrowing=self.borrowing, preemption=self.preemption, strict_fifo=self.strict_fifo
        )
        if not self.dynamic_priority:
            return vcs
        # LAS demotes jobs inside a VC, which only works if the VC allows preemption within it.
        return tuple(
            VirtualCluster(
                vc.name,
                vc.guarantee,
                vc.borrow_limit,
                vc.user_gpu_cap,
                True,
                vc.gpu_by_type,
                vc.strict_fifo,
            )
            for vc in vcs
        )

    def priority(self, job: SimJob, attained_gpu_s: float) -> int:
        """The job's priority now; with LAS, the queue level for the service it has had."""
        if not self.uses_priority:
            return DEFAULT_PRIORITY
        if not self.dynamic_priority or job.priority == OPPORTUNISTIC:
            return job.priority
        level = bisect.bisect_right(self.las_thresholds, attained_gpu_s)
        return 10 * (len(self.las_thresholds) + 1 - level)


def make_policy(name: str, las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS) -> Policy:
    if name == "fifo":
        return Policy(
            "fifo", borrowing=False, preemption=False, strict_fifo=True, uses_priority=False
        )
    if name == "shoal":
        return Policy("shoal", borrowing=True, preemption=True, strict_fifo=False)
    if name == "las":
        if not las_thresholds or list(las_thresholds) != sorted(las_thresholds):
            raise ValueError("LAS thresholds must be a non-empty increasing list of GPU-seconds")
        return Policy("las", True, True, False, tuple(las_thresholds))
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
