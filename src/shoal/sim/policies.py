"""Scheduling policies the simulator compares. All of them are the same ``core.schedule``; a
policy only chooses the virtual-cluster rules it runs under and the priority each job has.

- ``fifo``: the YARN capacity-scheduler baseline Philly ran. Each VC gets its guarantee and no
  more (no borrowing), jobs start in strict submission order inside a VC (no backfill), nothing
  is preempted. Priorities in the trace are ignored (YARN queues are FIFO).
- ``shoal``: the production policy. VCs lend idle capacity (borrowing), a VC that needs its
  guarantee back preempts borrowers (reclaim), priority classes order the queue and may preempt
  inside a VC, later jobs backfill around a VC's reserved head, and GPUs are packed best-fit.
  VCs whose cluster file entry sets ``aging`` age their jobs as the server does.
- ``las``: Tiresias' discretised two-dimensional least-attained-service (Gu et al., NSDI'19) on
  top of ``shoal``, switched on in every VC: a job drops one priority step each time the
  GPU-seconds it has received cross a threshold (``core.aging``, the server's per-VC aging), so
  short jobs overtake long ones, and a job that falls behind can be preempted within its VC.
- ``aging``: ``shoal`` with the server's per-VC aging switched on in every VC at the setting
  the docs recommend (``RECOMMENDED_AGING``: 1, 10 and 100 GPU-hours, a job preempted once runs
  at its own priority), unless the cluster file gives a VC its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shoal.core.aging import Aging, AgingError
from shoal.core.snapshot import VirtualCluster
from shoal.sim.cluster import SimCluster
from shoal.sim.workload import SimJob

POLICIES = ("fifo", "shoal", "las", "aging")
DEFAULT_LAS_THRESHOLDS = (3_600.0, 36_000.0)  # GPU-seconds: 1 and 10 GPU-hours
# What docs/scheduling-quality.md measured as the best trade on the contended Philly layouts.
RECOMMENDED_AGING = Aging.from_hours((1, 10, 100), max_preemptions=1)
DEFAULT_PRIORITY = 10  # the `test` class, what a job without one gets


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    borrowing: bool
    preemption: bool
    strict_fifo: bool
    # LAS in every VC, whatever the cluster file says (VCs must then allow preemption within).
    las: Aging | None = None
    cluster_aging: bool = False  # the cluster file's per-VC aging settings apply
    default_aging: Aging | None = None  # for the VCs the cluster file gives no aging setting
    uses_priority: bool = True  # False: every job has the default priority (plain FIFO)

    @property
    def las_thresholds(self) -> tuple[float, ...]:
        return () if self.las is None else self.las.thresholds_gpu_s

    def aging_by_vc(self, cluster: SimCluster) -> dict[str, Aging]:
        """The VCs whose jobs age, and how (empty: priorities never change)."""
        if self.las is not None:
            return {quota.name: self.las for quota in cluster.quotas}
        if not self.cluster_aging:
            return {}
        chosen = {q.name: q.aging or self.default_aging for q in cluster.quotas}
        return {name: aging for name, aging in chosen.items() if aging is not None}

    def virtual_clusters(self, cluster: SimCluster) -> tuple[VirtualCluster, ...]:
        vcs = cluster.virtual_clusters(
            borrowing=self.borrowing, preemption=self.preemption, strict_fifo=self.strict_fifo
        )
        if self.las is None:
            return vcs
        # LAS demotes jobs inside a VC, which only works if the VC allows preemption within it.
        return tuple(replace(vc, preempt_within=True) for vc in vcs)

    def base_priority(self, job: SimJob) -> int:
        """The job's own priority under this policy (before any aging)."""
        return job.priority if self.uses_priority else DEFAULT_PRIORITY


def make_policy(
    name: str,
    las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS,
    las_max_preemptions: int | None = None,
) -> Policy:
    if name == "fifo":
        return Policy(
            "fifo", borrowing=False, preemption=False, strict_fifo=True, uses_priority=False
        )
    if name == "shoal":
        return Policy(
            "shoal", borrowing=True, preemption=True, strict_fifo=False, cluster_aging=True
        )
    if name == "las":
        try:
            aging = Aging(tuple(las_thresholds), max_preemptions=las_max_preemptions)
        except AgingError as error:
            option = (
                "--las-max-preemptions"
                if error.field == "max_preemptions"
                else ("--las-thresholds (GPU-seconds)")
            )
            raise ValueError(f"{option}: {error.message}") from None
        return Policy("las", True, True, False, las=aging)
    if name == "aging":
        return Policy(
            "aging",
            borrowing=True,
            preemption=True,
            strict_fifo=False,
            cluster_aging=True,
            default_aging=RECOMMENDED_AGING,
        )
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
