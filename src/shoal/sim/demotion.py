"""Aging in the simulator: each job's priority from the service it has had (``core.aging``, the
function the server uses), updated only for the jobs whose service crossed a threshold.

A running job's priority changes only when its attained GPU-seconds reach the next threshold, at
a time known when it starts. Each running job has one check in a heap at that time; a cycle pops
the checks that are due and prices those jobs again, so a cycle costs the jobs that changed, not
every running job. The service a job has had is computed as ``attained + (now - run_started) x
GPUs``, exactly as a full rescan would compute it at the same cycle.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Protocol, TypeVar

from shoal.core.aging import Aging, aged_priority, level, next_threshold, protected
from shoal.sim.records import JobRecord
from shoal.sim.workload import SimJob

# A check is due this much before its exact time: floating point may put the crossing a few ulps
# earlier than the time computed for it, and a rescan would have seen it then.
EARLY_S = 1e-6


class Aged(Protocol):
    """What of a simulated job aging needs (``engine._Job``)."""

    job: SimJob
    record: JobRecord  # its preemptions so far (aging's max_preemptions)
    virtual_cluster: str
    priority: int
    priced_at: float  # the service its priority was computed from
    attained_gpu_s: float  # service up to ``run_started``
    run_started: float
    epoch: int
    stopping: bool


A = TypeVar("A", bound=Aged)


class Demotions:
    def __init__(self, aging: Mapping[str, Aging], base: Callable[[SimJob], int]) -> None:
        self.aging = aging
        self.base = base
        self._checks: list[tuple[float, int, str, int]] = []
        self._seq = itertools.count()

    def initial(self, job: SimJob, virtual_cluster: str) -> int:
        return aged_priority(self.base(job), 0.0, self.aging.get(virtual_cluster))

    def reprice(self, state: Aged, served: float, running: bool) -> bool:
        """Set the job's priority for ``served`` GPU-seconds, for its queue entry or (``running``,
        also while it stops) for the tasks it holds; whether it changed."""
        priority = self._priority(state, served, running)
        state.priced_at = served
        if priority == state.priority:
            return False
        state.priority = priority
        return True

    def _priority(self, state: Aged, served: float, running: bool) -> int:
        aging = self.aging.get(state.virtual_cluster)
        preempted = state.record.preemptions
        return aged_priority(self.base(state.job), served, aging, preempted, running)

    def started(self, state: Aged, now: float) -> bool:
        """A job (re)started: its tasks' priority (whether it changed from its queue entry's),
        and a check when its service reaches its next threshold."""
        changed = self.reprice(state, state.priced_at, running=True)
        self._watch(state, now)
        return changed

    def due(self, now: float, running: Mapping[str, A]) -> list[A]:
        """The running jobs whose service crossed a threshold since they were priced, each
        already repriced; the caller updates what depends on the priority."""
        popped = []
        while self._checks and self._checks[0][0] <= now + EARLY_S:
            popped.append(heapq.heappop(self._checks))
        changed = []
        for check in popped:
            at, _, job_id, epoch = check
            state = running.get(job_id)
            if state is None or state.epoch != epoch or state.stopping:
                continue  # it stopped or ended since
            aging = self.aging[state.virtual_cluster]
            served = state.attained_gpu_s + (now - state.run_started) * state.job.gpus
            if level(served, aging) == level(state.priced_at, aging):
                heapq.heappush(self._checks, (at, next(self._seq), job_id, epoch))  # not yet
                continue
            if self.reprice(state, served, running=True):
                changed.append(state)
            self._watch(state, now)
        return changed

    def _watch(self, state: Aged, now: float) -> None:
        aging = self.aging.get(state.virtual_cluster)
        gpus = state.job.gpus
        if aging is None or not gpus or protected(aging, state.record.preemptions):
            return  # its priority no longer changes while it runs
        threshold = next_threshold(state.priced_at, aging)
        if threshold is None:
            return
        served = state.attained_gpu_s + (now - state.run_started) * gpus
        at = now + (threshold - served) / gpus
        heapq.heappush(self._checks, (at, next(self._seq), state.job.job_id, state.epoch))

    def rescan(self, now: float, jobs: Iterable[Aged], running: Container[str]) -> dict[str, int]:
        """Every job's priority from scratch (``--check``: what the repricing must agree with)."""
        out = {}
        for state in jobs:
            held = state.job.job_id in running
            served = state.attained_gpu_s
            if held and not state.stopping:
                served += (now - state.run_started) * state.job.gpus
            out[state.job.job_id] = self._priority(state, served, held)
        return out

    def demotion_at(self, state: Aged, now: float) -> float | None:
        """When the running job's service next crosses a threshold (a cycle then decides
        whether a job with less service takes its place); None: never again."""
        aging = self.aging.get(state.virtual_cluster)
        gpus = state.job.gpus
        if aging is None or not gpus or protected(aging, state.record.preemptions):
            return None
        served = state.attained_gpu_s + (now - state.run_started) * gpus
        for threshold in aging.thresholds_gpu_s:
            if threshold > served + 1e-9:
                return now + (threshold - served) / gpus
        return None
