"""Choosing preemption victims: the fewest running jobs whose resources, once freed, let a job
that is entitled to them run.

Who may be a victim of job J:
- `oppo` jobs, of any VC (never for another `oppo` job);
- jobs of *other* VCs that are borrowing (not inside their VC's guarantee), when J is inside its
  own guarantee (reclaim);
- jobs of J's own VC with a lower priority, when that VC allows preemption within it.

Candidates are taken `oppo` first, then lowest priority, then newest, until J fits; then every
victim that turns out not to be needed is dropped again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shoal.core.quota import RunningJob
from shoal.core.snapshot import JobRequest, VirtualCluster

Fits = Callable[[frozenset[str]], bool]  # does J fit once these jobs' resources are free?


def eligible_victims(
    job: JobRequest,
    guaranteed: bool,
    running: Sequence[RunningJob],
    inside_guarantee: set[str],
    vc: VirtualCluster | None,
    taken: set[str],
) -> list[RunningJob]:
    """``guaranteed``: the job is inside its VC's guarantee, so it may also reclaim borrowed
    capacity and displace `oppo` jobs; otherwise only lower classes of its own VC qualify."""
    if job.opportunistic:
        return []
    within = vc is not None and vc.preempt_within

    def eligible(other: RunningJob) -> bool:
        if other.terminating or other.job_id in taken or other.job_id == job.job_id:
            return False
        if other.opportunistic:
            return guaranteed
        if other.virtual_cluster != job.virtual_cluster:
            return guaranteed and other.job_id not in inside_guarantee
        return within and other.priority < job.priority

    found = [r for r in running if eligible(r)]
    found.sort(key=lambda r: (not r.opportunistic, r.priority, -r.submitted_at, r.job_id))
    return found


def choose_victims(
    candidates: Sequence[RunningJob],
    already_free: frozenset[str],
    fits: Fits,
    fewest: int = 1,
) -> list[RunningJob] | None:
    """The fewest victims (in preference order) that make room, or None if none would.
    ``fewest``: fewer than this many of the first candidates surely do not make room (the
    caller counted it), so trying starts there."""
    chosen: list[RunningJob] = list(candidates[: max(fewest - 1, 0)])
    for candidate in candidates[len(chosen) :]:
        chosen.append(candidate)
        if fits(already_free | {c.job_id for c in chosen}):
            break
    else:
        return None
    for victim in list(reversed(chosen[:-1])):  # keep the cheapest set that still works
        rest = [c for c in chosen if c is not victim]
        if fits(already_free | {c.job_id for c in rest}):
            chosen = rest
    return chosen


def describe_victim(victim: RunningJob, job: JobRequest) -> str:
    if victim.opportunistic:
        why = "it is an opportunistic (oppo) job on capacity that is not its own"
    elif victim.virtual_cluster != job.virtual_cluster:
        why = (
            f"it borrows capacity beyond virtual cluster {victim.virtual_cluster}'s "
            f"guarantee, and {job.virtual_cluster} needs its own guarantee back"
        )
    else:
        why = f"it has a lower priority ({victim.priority} < {job.priority}) in the same VC"
    return f"job {victim.job_id} is preempted for job {job.job_id}: {why}"
