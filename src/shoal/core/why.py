""" "Why is my job pending?": the running jobs that would have to finish (or be preempted) before
a waiting job fits, found with the same simulation the preemption logic uses."""

from __future__ import annotations

from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.preemption import choose_victims
from shoal.core.quota import RunningJob, beyond_reach, running_jobs
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import ClusterSnapshot, JobRequest, VirtualCluster


def blocking_jobs(snapshot: ClusterSnapshot, job: JobRequest, limit: int = 20) -> list[str] | None:
    """The fewest running jobs whose end would let ``job`` fit now, newest and lowest priority
    first; ``[]`` if it fits already, None if even an idle cluster would not do. ``[]`` too when
    it asks more than its VC may ever use: no job's end would help, and its pending reason
    (``quota.beyond_reach``) says what would."""
    vc = next((v for v in snapshot.virtual_clusters if v.name == job.virtual_cluster), None)
    if vc is not None and beyond_reach(vc, job) is not None:
        return []
    running = running_jobs(snapshot.allocations)
    candidates = sorted(running, key=lambda r: (r.priority, -r.submitted_at, r.job_id))

    def fits(freed: frozenset[str]) -> bool:
        held = [a for a in snapshot.allocations if a.job_id not in freed]
        pool = NodePool(snapshot.nodes, held)
        return not isinstance(pool.place_job(job, commit=False), PlacementFailure)

    if fits(frozenset()):
        return _quota_blockers(vc, job, running)[:limit] if vc is not None else []
    chosen = choose_victims(candidates, frozenset(), fits)
    if chosen is None:
        return None
    return [c.job_id for c in chosen][:limit]


def _quota_blockers(vc: VirtualCluster, job: JobRequest, running: list[RunningJob]) -> list[str]:
    """The fewest running jobs of ``job``'s own VC (lowest priority and newest first) whose end
    would bring the VC's use plus ``job`` within its guarantee and borrowing limit: what a job
    that fits the nodes but not its VC's quota waits for. ``[]`` when the quota is no bar."""
    if job.opportunistic or vc.borrow_limit is None:
        return []
    most = vc.guarantee + vc.borrow_limit
    own = [r for r in running if r.virtual_cluster == vc.name and not r.opportunistic]
    used = sum((r.usage for r in own), ResourceVector())
    chosen: list[str] = []
    for candidate in sorted(own, key=lambda r: (r.priority, -r.submitted_at, r.job_id)):
        if (used + job.total).fits_in(most):
            break
        used = used - candidate.usage
        chosen.append(candidate.job_id)
    return chosen if (used + job.total).fits_in(most) else []
