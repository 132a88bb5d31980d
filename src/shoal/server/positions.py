"""Queue positions the API shows, published by the scheduler after each cycle.

The scheduler runs in a thread of the server (``QueuePositions`` is then read directly) or in a
process of its own, which sends its latest ``QueuePositions`` to the server a few times a second
as ``encoded()`` text (``server/scheduler_process.py``), read there by ``SentPositions``: a
request never waits for the scheduler. Either way the API calls ``position_of`` /
``positions_of`` on a ``Positions``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shoal.core.queueindex import QueueIndex, QueueKey, queue_key
from shoal.core.snapshot import JobRequest
from shoal.core.states import State
from shoal.store.models import Job


class Positions(Protocol):
    def of_ids(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Positions of the jobs that are in the last cycle's queue (the others are left out)."""
        ...


def position_of(positions: Positions, job: Job) -> int | None:
    """The position of the job row ``job`` (None: not waiting, or not in the last queue)."""
    return positions_of(positions, [job]).get(job.id)


def positions_of(positions: Positions, jobs: Iterable[Job]) -> dict[str, int]:
    """Positions of the waiting jobs among ``jobs`` (one question for all of them)."""
    waiting = [job.id for job in jobs if job.state == State.WAITING.value]
    return positions.of_ids(waiting) if waiting else {}


@dataclass(frozen=True)
class QueuePositions:
    """Queue positions as of the last cycle: a job's place in its VC's queue (priority, then
    submission time, then id; in an aging VC, the priority the scheduler gives it), counted among
    the jobs still waiting. Published by the scheduler after each cycle as copies of its queue
    index's key lists (a pointer copy per VC) and of its queue, so a reader never sees what the
    scheduler is changing."""

    keys: dict[str, list[QueueKey]] = field(default_factory=dict)
    queue: Mapping[str, JobRequest] = field(default_factory=dict)
    per_vc: bool = True

    def of_ids(self, job_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for job_id in job_ids:
            job = self.queue.get(job_id)
            if job is None:
                continue
            keys = self.keys.get(job.virtual_cluster if self.per_vc else "")
            if keys is None:
                continue
            key = queue_key(job)
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                found[job_id] = at + 1
        return found

    @classmethod
    def publish(
        cls, index: QueueIndex, queue: Mapping[str, JobRequest], gone: Iterable[str]
    ) -> QueuePositions:
        """From the cycle's queue index and queue, less the jobs the cycle admitted or gave up
        on (``gone``)."""
        keys = {vc: list(listed.keys) for vc, listed in index.by_vc.items()}
        for job in (queue[j] for j in gone if j in queue):
            listed = keys.get(job.virtual_cluster if index.per_vc else "")
            if listed:
                at = bisect.bisect_left(listed, queue_key(job))
                if at < len(listed) and listed[at] == queue_key(job):
                    del listed[at]
        return cls(keys, dict(queue), index.per_vc)

    def encoded(self) -> list[str]:
        """Each queue's job ids in queue order, one per line: cheap to send and to unpickle
        (one string per VC, not an object per job)."""
        return ["\n".join(key[2] for key in keys) for keys in self.keys.values() if keys]


class SentPositions:
    """Positions as the scheduler process last sent them (``QueuePositions.encoded``); the
    lookup table is built on the first question after each update."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: list[str] = []
        self._table: dict[str, int] | None = {}

    def update(self, queues: list[str]) -> None:
        with self._lock:
            self._queues, self._table = queues, None

    def of_ids(self, job_ids: Sequence[str]) -> dict[str, int]:
        with self._lock:
            if self._table is None:
                self._table = {
                    job_id: at
                    for queue in self._queues
                    for at, job_id in enumerate(queue.split("\n"), start=1)
                }
            table = self._table
        return {job_id: table[job_id] for job_id in job_ids if job_id in table}
