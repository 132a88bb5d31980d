"""The queue, per virtual cluster in queue order, kept between cycles.

A snapshot's queue is a plain tuple of immutable ``JobRequest``s. Sorting 50,000 of them every
cycle costs more than a whole cycle may take, and from one cycle to the next only a few jobs
arrive or leave. So the index keeps, per VC, the jobs sorted by ``queue_key`` and, given the next
snapshot's queue, matches jobs by object identity and moves only those that changed (a job whose
request changed is a new object: the old one leaves, the new one arrives). When most of the queue
changed it sorts from scratch, which gives the same lists.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator

from shoal.core.snapshot import JobRequest

QueueKey = tuple[int, float, str]  # (-priority, submitted_at, job_id): smaller runs first


def queue_key(job: JobRequest) -> QueueKey:
    return (-job.priority, job.submitted_at, job.job_id)


class _VcQueue:
    """One VC's waiting jobs in queue order: keys and jobs in two parallel lists."""

    __slots__ = ("jobs", "keys")

    def __init__(self) -> None:
        self.keys: list[QueueKey] = []
        self.jobs: list[JobRequest] = []

    def add(self, job: JobRequest) -> None:
        key = queue_key(job)
        at = bisect.bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.jobs.insert(at, job)

    def remove(self, job: JobRequest) -> None:
        key = queue_key(job)
        at = bisect.bisect_left(self.keys, key)
        while at < len(self.jobs) and self.keys[at] == key:
            if self.jobs[at] is job:
                del self.keys[at]
                del self.jobs[at]
                return
            at += 1
        raise KeyError(job.job_id)  # the index lost track of the queue: a bug, not user input


class QueueIndex:
    def __init__(self) -> None:
        self._source: tuple[JobRequest, ...] | None = None
        self._by_id: dict[int, JobRequest] = {}
        self.by_vc: dict[str, _VcQueue] = {}
        self.per_vc = True

    def __len__(self) -> int:
        return len(self._by_id)

    def sync(self, queue: tuple[JobRequest, ...], per_vc: bool) -> None:
        """Make the index hold exactly ``queue`` (``per_vc`` False: one queue for everyone)."""
        if queue is self._source and per_vc == self.per_vc:
            return
        by_id = {id(job): job for job in queue}
        old = self._by_id
        added = by_id.keys() - old.keys()
        removed = old.keys() - by_id.keys()
        if per_vc != self.per_vc or len(added) + len(removed) > len(by_id) // 2 + 64:
            self._rebuild(queue, per_vc)
        else:
            for key in removed:
                job = old[key]
                self.by_vc[self._vc(job)].remove(job)
            for key in added:
                job = by_id[key]
                self.by_vc.setdefault(self._vc(job), _VcQueue()).add(job)
        self._source, self._by_id = queue, by_id

    def _vc(self, job: JobRequest) -> str:
        return job.virtual_cluster if self.per_vc else ""

    def _rebuild(self, queue: tuple[JobRequest, ...], per_vc: bool) -> None:
        self.per_vc = per_vc
        self.by_vc = {}
        for job in sorted(queue, key=queue_key):
            vc = self.by_vc.get(self._vc(job))
            if vc is None:
                vc = self.by_vc[self._vc(job)] = _VcQueue()
            vc.keys.append(queue_key(job))
            vc.jobs.append(job)

    def all_jobs(self) -> list[JobRequest]:
        """Every queued job (in no particular order)."""
        return list(self._by_id.values())

    def heads(self, depth: int) -> Iterator[tuple[str, int, JobRequest]]:
        """The first ``depth`` jobs of every VC: (VC, position from 0, job)."""
        for vc, queue in self.by_vc.items():
            for position, job in enumerate(queue.jobs[:depth]):
                yield vc, position, job

    def starting_at(self, cursor: QueueKey | None) -> Iterator[tuple[str, int, JobRequest]]:
        """Every job whose key is at least ``cursor`` (all with None), in key order across VCs:
        (VC, position in its VC, job). Lazy: a caller that stops early pays for what it took."""

        def one(vc: str, queue: _VcQueue) -> Iterator[tuple[QueueKey, str, int, JobRequest]]:
            start = 0 if cursor is None else bisect.bisect_left(queue.keys, cursor)
            for position in range(start, len(queue.jobs)):
                yield queue.keys[position], vc, position, queue.jobs[position]

        merged = heapq.merge(*(one(vc, q) for vc, q in self.by_vc.items()), key=lambda t: t[0])
        for _, vc, position, job in merged:
            yield vc, position, job

    def position(self, job: JobRequest) -> int | None:
        """1-based place of ``job`` in its VC's queue order (None if it is not queued)."""
        queue = self.by_vc.get(self._vc(job))
        if queue is None:
            return None
        at = bisect.bisect_left(queue.keys, queue_key(job))
        return at + 1 if at < len(queue.jobs) and queue.jobs[at] is job else None
