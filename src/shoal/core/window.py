"""Which queued jobs one bounded cycle examines (see core/budget.py for the rules and the bound).

The window is every VC's first ``head_depth`` jobs, then up to ``backfill_jobs`` jobs in queue
order from the resume point. When the queue is shorter than that, the window is the whole queue
and the cycle is exactly the unbounded one. Some jobs are *mandatory*: the heads and the first
``min_backfill`` backfill jobs; a cycle that stops early still examines them, which is what moves
the resume point forward every cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shoal.core.budget import Budget
from shoal.core.queueindex import QueueIndex, QueueKey, queue_key
from shoal.core.snapshot import JobRequest

Entry = tuple[str, int, JobRequest]  # (VC, position in its queue, job)


@dataclass(slots=True)
class Window:
    jobs: list[JobRequest]
    backfill: list[JobRequest]  # the part after the heads, in queue order
    mandatory: set[str] | None  # job ids examined even when the cycle stops early (None: all)
    next_key: QueueKey | None  # the first job past the window (None: the window reached the end)


def select_window(
    index: QueueIndex, budget: Budget, resume_from: QueueKey | None, strict_vcs: set[str]
) -> Window:
    depth = budget.head_depth
    whole = budget.backfill_jobs >= len(index) and budget.placements >= len(index)
    if whole and budget.deadline is None and (budget.strict_followers or not strict_vcs):
        # The whole queue fits in the window and nothing can stop the cycle early: no merge, no
        # mandatory set, no resume point (the cycle sorts the window itself).
        return Window(index.all_jobs(), [], None, None)
    heads = [job for _, _, job in index.heads(depth)]
    backfill: list[JobRequest] = []
    next_key: QueueKey | None = None
    wrapped = resume_from is None
    sweep: Iterator[Entry] = index.starting_at(resume_from)
    while True:
        for vc, position, job in sweep:
            if position < depth:
                continue  # a head: examined anyway
            if vc in strict_vcs and not budget.strict_followers:
                continue  # behind a strict-FIFO head: it cannot start before the heads do
            if len(backfill) == budget.backfill_jobs:
                next_key = queue_key(job)
                break
            backfill.append(job)
        if next_key is not None or wrapped:
            break
        # The end of the queue: go on from its start (jobs before the resume point) this cycle.
        wrapped = True
        seen = {job.job_id for job in backfill}
        sweep = ((vc, p, j) for vc, p, j in index.starting_at(None) if j.job_id not in seen)
        assert resume_from is not None
        sweep = _until(sweep, resume_from)
    mandatory = {job.job_id for job in heads}
    mandatory.update(job.job_id for job in backfill[: budget.min_backfill])
    return Window(heads + backfill, backfill, mandatory, next_key)


def _until(sweep: Iterable[Entry], stop: QueueKey) -> Iterator[Entry]:
    for item in sweep:
        if queue_key(item[2]) >= stop:
            return
        yield item
