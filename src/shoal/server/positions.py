"""Queue positions the API shows, published by the scheduler after each cycle."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from shoal.core.queueindex import QueueIndex, QueueKey, queue_key
from shoal.core.snapshot import JobRequest
from shoal.core.states import State
from shoal.store.models import Job


@dataclass(frozen=True)
class QueuePositions:
    """Queue positions as of the last cycle, for the API: a job's place in its VC's queue
    (priority, then submission time, then id), counted among the jobs still waiting. Published
    by the scheduler after each cycle as copies of its queue index's key lists (a pointer copy
    per VC), so the API never reads what the scheduler is changing."""

    keys: dict[str, list[QueueKey]] = field(default_factory=dict)
    per_vc: bool = True

    def of(self, job: Job) -> int | None:
        """The position of the job row ``job`` (None: not in the last cycle's queue)."""
        if job.state != State.WAITING.value:
            return None
        keys = self.keys.get(job.virtual_cluster if self.per_vc else "")
        if keys is None:
            return None
        key = (-job.priority, job.submitted_at, job.id)
        at = bisect.bisect_left(keys, key)
        return at + 1 if at < len(keys) and keys[at] == key else None

    @classmethod
    def publish(cls, index: QueueIndex, gone: Iterable[JobRequest]) -> QueuePositions:
        """From the cycle's queue index, less the jobs the cycle admitted or gave up on."""
        keys = {vc: list(queue.keys) for vc, queue in index.by_vc.items()}
        for job in gone:
            listed = keys.get(job.virtual_cluster if index.per_vc else "")
            if listed:
                at = bisect.bisect_left(listed, queue_key(job))
                if at < len(listed) and listed[at] == queue_key(job):
                    del listed[at]
        return cls(keys, index.per_vc)
