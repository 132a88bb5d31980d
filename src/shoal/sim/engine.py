"""The discrete-event simulator: a virtual clock, the trace's arrivals, and ``core.schedule``.

Events are arrivals, completions, preempted jobs finishing their stop, and (for LAS) a running
job crossing an attained-service threshold. After the events of one instant, if anything changed
and jobs wait, a scheduling cycle runs: at that instant (``interval_s`` = 0) or at the next
multiple of ``interval_s`` (a periodic scheduler). A cycle builds a ``ClusterSnapshot`` exactly
like the server does and applies the returned ``Plan``: admissions start, preemption victims stop
after ``stop_s`` and go back to the queue keeping their submission time, having lost the work done
since their last checkpoint (``checkpoint_s``; 0 means they lose nothing).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shoal.core.plan import Plan
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, JobRequest, TaskAllocation, allocation_for
from shoal.sim.cluster import SimCluster
from shoal.sim.invariants import check_allocations
from shoal.sim.policies import Policy
from shoal.sim.records import JobRecord, SimResult, Timeline
from shoal.sim.workload import SimJob, Trace

FINISH, STOPPED, DEMOTE = 0, 1, 2
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class SimConfig:
    interval_s: float = 0.0  # 0: a cycle at every instant something changed
    checkpoint_s: float = 1_800.0  # preempted jobs keep the work up to their last checkpoint
    stop_s: float = 30.0  # how long a preempted job holds its resources while it stops
    check_invariants: bool = False  # verify no over-allocation after every cycle (tests)


@dataclass(slots=True)
class _Job:
    job: SimJob
    virtual_cluster: str
    remaining_s: float
    record: JobRecord
    priority: int
    request: JobRequest | None = None
    allocations: tuple[TaskAllocation, ...] = ()
    run_started: float = 0.0
    attained_gpu_s: float = 0.0
    epoch: int = 0
    stopping: bool = False


@dataclass(slots=True)
class _Clock:
    next_cycle: float | None = None
    cycles: int = 0
    scheduling_s: float = 0.0
    last_plan: Plan = field(default_factory=Plan)


class Simulator:
    def __init__(
        self, cluster: SimCluster, trace: Trace, policy: Policy, config: SimConfig
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.config = config
        self.vcs = policy.virtual_clusters(cluster)
        known = {vc.name for vc in self.vcs}
        self.remapped = 0
        self.jobs: list[_Job] = [self._state(job, known) for job in trace.jobs]
        self.trace = trace
        self.waiting: dict[str, _Job] = {}
        self.running: dict[str, _Job] = {}
        self.events: list[tuple[float, int, int, str, int]] = []
        self.seq = itertools.count()
        self.free_gpus = {node.name: node.capacity.gpu for node in cluster.nodes}
        self.busy_gpus = 0
        self._allocations: tuple[TaskAllocation, ...] | None = None
        self.fragmented = 0
        self.timeline = Timeline()
        self.clock = _Clock()
        self.finished = 0

    def _state(self, job: SimJob, known: set[str]) -> _Job:
        vc = job.virtual_cluster
        if vc not in known:
            if self.cluster.unknown_virtual_cluster is not None:
                vc = self.cluster.unknown_virtual_cluster
            elif len(known) == 1:
                vc = next(iter(known))
            self.remapped += vc != job.virtual_cluster
        record = JobRecord(job.job_id, vc, job.gpus, job.submit_s, job.duration_s)
        return _Job(job, vc, job.duration_s, record, self.policy.priority(job, 0.0))

    def run(self, progress: Progress | None = None) -> SimResult:
        started = time.perf_counter()
        arrivals = iter(self.jobs)
        upcoming = next(arrivals, None)
        reported, step = 0, max(len(self.jobs) // 500, 1)
        while True:
            t_arrival = upcoming.job.submit_s if upcoming is not None else math.inf
            t_event = self.events[0][0] if self.events else math.inf
            now = min(t_arrival, t_event)
            next_cycle = self.clock.next_cycle
            if next_cycle is not None and next_cycle < now:
                self._cycle(next_cycle)
                continue
            if now == math.inf:
                break
            changed = False
            while self.events and self.events[0][0] == now:
                changed |= self._event(heapq.heappop(self.events), now)
            while upcoming is not None and upcoming.job.submit_s == now:
                self.waiting[upcoming.job.job_id] = upcoming
                changed = True
                upcoming = next(arrivals, None)
            self._sample(now)
            if changed and self.waiting and self.clock.next_cycle is None:
                interval = self.config.interval_s
                self.clock.next_cycle = math.ceil(now / interval) * interval if interval else now
            if progress is not None and self.finished >= reported + step:
                reported = self.finished
                progress(reported, len(self.jobs))
        if progress is not None:
            progress(self.finished, len(self.jobs))
        return self._result(time.perf_counter() - started)

    def _event(self, event: tuple[float, int, int, str, int], now: float) -> bool:
        _, kind, _, job_id, epoch = event
        state = self.running.get(job_id)
        if state is None or state.epoch != epoch:
            return False  # superseded: the job was preempted or already ended
        if kind == DEMOTE:
            return self._demote(state, now)
        self._release(state, now)
        if kind == FINISH:
            state.record.end_s = now
            self.finished += 1
        else:
            state.stopping = False
            state.request = None
            self.waiting[job_id] = state
        return True

    def _push(self, at: float, kind: int, state: _Job) -> None:
        heapq.heappush(self.events, (at, kind, next(self.seq), state.job.job_id, state.epoch))

    def _cycle(self, now: float) -> None:
        self.clock.next_cycle = None
        if self.policy.dynamic_priority:
            self._refresh_running_priorities(now)
        queue = tuple(self._request(state) for state in self.waiting.values())
        snapshot = ClusterSnapshot(self.cluster.nodes, queue, self._held(), self.vcs)
        tick = time.perf_counter()
        plan = schedule(snapshot, now)
        self.clock.scheduling_s += time.perf_counter() - tick
        self.clock.cycles += 1
        self.clock.last_plan = plan
        self._apply(plan, now)
        if self.config.check_invariants:
            check_allocations(self.cluster.nodes, self._held(), now)
        self._sample(now, after_cycle=True)

    def _request(self, state: _Job) -> JobRequest:
        if state.request is None:
            job = state.job
            state.request = JobRequest(
                job.job_id, job.roles, state.priority, job.submit_s, state.virtual_cluster, job.user
            )
        return state.request

    def _apply(self, plan: Plan, now: float) -> None:
        for admission in plan.admissions:
            state = self.waiting.pop(admission.job_id)
            request = self._request(state)
            state.allocations = tuple(allocation_for(request, p) for p in admission.placements)
            self._allocations = None
            for placement in admission.placements:
                self.free_gpus[placement.node] -= placement.resources.gpu
                self.busy_gpus += placement.resources.gpu
            state.run_started = now
            if state.record.first_start_s is None:
                state.record.first_start_s = now
            state.epoch += 1
            self.running[admission.job_id] = state
            self._push(now + state.remaining_s, FINISH, state)
            self._push_demotion(state, now)
        for preemption in plan.preemptions:
            self._preempt(self.running[preemption.victim_job_id], now)
        for never in plan.infeasible:
            state = self.waiting.pop(never.job_id)
            state.record.never_reason = f"{never.reason.code}: {never.reason.message}"

    def _preempt(self, state: _Job, now: float) -> None:
        ran = now - state.run_started
        interval = self.config.checkpoint_s
        kept = ran if interval <= 0 else math.floor(ran / interval) * interval
        state.remaining_s -= kept
        state.record.lost_s += ran - kept
        state.record.preemptions += 1
        state.attained_gpu_s += ran * state.job.gpus
        state.run_started = now  # attained service stops growing: the job is stopping
        state.stopping = True
        state.epoch += 1  # its completion and demotion events no longer count
        state.allocations = tuple(replace(a, terminating=True) for a in state.allocations)
        self._allocations = None
        self._push(now + self.config.stop_s, STOPPED, state)

    def _release(self, state: _Job, now: float) -> None:
        del self.running[state.job.job_id]
        if not state.stopping:
            state.attained_gpu_s += (now - state.run_started) * state.job.gpus
        for alloc in state.allocations:
            self.free_gpus[alloc.node] += alloc.resources.gpu
            self.busy_gpus -= alloc.resources.gpu
        state.allocations = ()
        self._allocations = None
        state.epoch += 1

    def _push_demotion(self, state: _Job, now: float) -> None:
        """LAS: an event when the running job's service crosses its next threshold (a cycle
        then decides whether a job with less service should take its place)."""
        if not self.policy.dynamic_priority or not state.job.gpus:
            return
        served = state.attained_gpu_s + (now - state.run_started) * state.job.gpus
        for threshold in self.policy.las_thresholds:
            if threshold > served + 1e-9:
                at = now + (threshold - served) / state.job.gpus
                if at < state.run_started + state.remaining_s:
                    self._push(at, DEMOTE, state)
                return

    def _demote(self, state: _Job, now: float) -> bool:
        self._push_demotion(state, now)
        return bool(self.waiting)

    def _refresh_running_priorities(self, now: float) -> None:
        for state in self.running.values():
            served = state.attained_gpu_s
            if not state.stopping:
                served += (now - state.run_started) * state.job.gpus
            priority = self.policy.priority(state.job, served)
            if priority != state.priority:
                state.priority = priority
                state.request = None
                state.allocations = tuple(replace(a, priority=priority) for a in state.allocations)
                self._allocations = None
        for state in self.waiting.values():
            priority = self.policy.priority(state.job, state.attained_gpu_s)
            if priority != state.priority:
                state.priority = priority
                state.request = None

    def _held(self) -> tuple[TaskAllocation, ...]:
        """Every running task's allocation, rebuilt only after tasks started or stopped."""
        if self._allocations is None:
            self._allocations = tuple(
                itertools.chain.from_iterable(s.allocations for s in self.running.values())
            )
        return self._allocations

    def _sample(self, now: float, after_cycle: bool = False) -> None:
        if after_cycle:  # only a cycle can tell what waits for capacity; kept until the next
            self.fragmented = self._fragmented()
        self.timeline.add(
            now, self.busy_gpus, len(self.waiting), len(self.running), self.fragmented
        )

    def _fragmented(self) -> int:
        """Free GPUs on nodes too small for the smallest GPU task of any waiting job."""
        if not self.waiting:
            return 0
        smallest = min(
            (
                r.per_instance.gpu
                for s in self.waiting.values()
                for r in s.job.roles
                if r.per_instance.gpu
            ),
            default=0,
        )
        if not smallest:
            return 0
        return sum(free for free in self.free_gpus.values() if 0 < free < smallest)

    def _result(self, wall_s: float) -> SimResult:
        reasons = {
            p.job_id: f"{p.reason.code}: {p.reason.message}" for p in self.clock.last_plan.pending
        }
        for state in self.waiting.values():
            state.record.never_reason = reasons.get(state.job.job_id, "never scheduled")
        return SimResult(
            policy=self.policy.name,
            cluster=self.cluster.name,
            total_gpus=self.cluster.total_gpus,
            trace=self.trace.source,
            notes=(
                *self.trace.notes,
                f"{self.remapped} jobs of VCs not in the cluster file were remapped",
            ),
            records=[state.record for state in self.jobs],
            timeline=self.timeline,
            cycles=self.clock.cycles,
            scheduling_s=self.clock.scheduling_s,
            wall_s=wall_s,
            config=self.config,
        )
