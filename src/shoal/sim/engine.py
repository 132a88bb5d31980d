"""The discrete-event simulator: a virtual clock, the trace's arrivals, and ``core.schedule``.

Events are arrivals, completions, preempted jobs finishing their stop, and (with aging) a running
job crossing an attained-service threshold. After the events of one instant, if anything changed
and jobs wait, a scheduling cycle runs: at that instant (``interval_s`` = 0) or at the next
multiple of ``interval_s`` (a periodic scheduler). A cycle builds a ``ClusterSnapshot`` exactly
like the server does and applies the returned ``Plan``: admissions start, preemption victims stop
after ``stop_s`` and go back to the queue keeping their submission time, having lost the work done
since their last checkpoint (``checkpoint_s``; 0 means they lose nothing).

With scaling pools (``sim/pools.py``) an autoscaler pass runs every ``autoscale_interval_s``
while it has something to decide: after a cycle left jobs waiting, after a pool node's tasks
started or ended, and when an idle or join timeout runs out. It calls ``plan_scaling``, the
function the server's autoscaler applies; a launched machine joins as a node after its pool's
boot delay (a JOIN event).

Per event the engine does work in what changed, not in the size of the queue or the cluster: the
queue and the running allocations are kept as ordered dicts the snapshot copies in one step,
fragmentation is counted from a histogram of free GPUs per node, and with aging only the jobs
whose service crossed a threshold get a new priority (``sim/demotion.py``).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shoal.core.autoscale import CAPACITY_REASONS
from shoal.core.cache import SchedulerCache
from shoal.core.plan import Plan, ReasonCode
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    TaskAllocation,
    allocation_for,
)
from shoal.sim.cluster import SimCluster
from shoal.sim.demotion import Demotions
from shoal.sim.freegpus import FreeGpus
from shoal.sim.invariants import check_allocations, check_priorities
from shoal.sim.policies import Policy
from shoal.sim.pools import Fleet, PoolUsage, always_on_usage, pass_at
from shoal.sim.records import JobRecord, SimResult, Timeline
from shoal.sim.workload import SimJob, Trace

FINISH, STOPPED, DEMOTE, JOIN = 0, 1, 2, 3
Progress = Callable[[int, int], None]
AllocationKey = tuple[str, str, int]  # job, role, index


@dataclass(frozen=True, slots=True)
class SimConfig:
    interval_s: float = 0.0  # 0: a cycle at every instant something changed
    checkpoint_s: float = 1_800.0  # preempted jobs keep the work up to their last checkpoint
    stop_s: float = 30.0  # how long a preempted job holds its resources while it stops
    check_invariants: bool = False  # verify no over-allocation after every cycle (tests)
    autoscale_interval_s: float = 10.0  # scaling pools: the autoscaler's period (the server's)


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
    priced_at: float = 0.0  # the attained service its priority was computed from
    epoch: int = 0
    stopping: bool = False


@dataclass(slots=True)
class _Clock:
    next_cycle: float | None = None
    next_scale: float | None = None  # the next autoscaler pass (clusters with pools)
    now: float = 0.0  # the last instant anything happened at
    cycles: int = 0
    scheduling_s: float = 0.0
    last_plan: Plan = field(default_factory=Plan)


class Simulator:
    def __init__(
        self, cluster: SimCluster, trace: Trace, policy: Policy, config: SimConfig
    ) -> None:
        self.cluster = cluster
        self.nodes: tuple[NodeState, ...] = cluster.nodes  # fixed nodes, then joined pool nodes
        self.fleet = Fleet(cluster.pools, cluster.nodes) if cluster.pools else None
        self.policy = policy
        self.config = config
        self.vcs = policy.virtual_clusters(cluster)
        self.aging = Demotions(policy.aging_by_vc(cluster), policy.base_priority)
        known = {vc.name for vc in self.vcs}
        self.remapped = 0
        self.jobs: list[_Job] = [self._state(job, known) for job in trace.jobs]
        self.trace = trace
        self.waiting: dict[str, _Job] = {}
        # The queue as the snapshot takes it, in the order jobs joined it (kept beside
        # ``waiting`` so a cycle copies it instead of rebuilding it).
        self.queue: dict[str, JobRequest] = {}
        self.running: dict[str, _Job] = {}
        self.events: list[tuple[float, int, int, str, int]] = []
        self.seq = itertools.count()
        self.cache = SchedulerCache()  # saves work between cycles, never changes a decision
        self.free = FreeGpus(cluster.nodes)
        # Every running task's allocation, in the order the jobs started.
        self.allocations: dict[AllocationKey, TaskAllocation] = {}
        self._held_cache: tuple[TaskAllocation, ...] | None = None
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
        return _Job(job, vc, job.duration_s, record, self.aging.initial(job, vc))

    def run(self, progress: Progress | None = None) -> SimResult:
        started = time.perf_counter()
        arrivals = iter(self.jobs)
        upcoming = next(arrivals, None)
        reported, step = 0, max(len(self.jobs) // 500, 1)
        if self.fleet is not None and upcoming is not None:  # launches the pools' minimum
            self.clock.next_scale = upcoming.job.submit_s
        while True:
            t_arrival = upcoming.job.submit_s if upcoming is not None else math.inf
            t_event = self.events[0][0] if self.events else math.inf
            now = min(t_arrival, t_event)
            if self._run_due(now):
                continue
            if now == math.inf:
                break
            self.clock.now = now
            changed = False
            while self.events and self.events[0][0] == now:
                changed |= self._event(heapq.heappop(self.events), now)
            while upcoming is not None and upcoming.job.submit_s == now:
                self._arrive(upcoming)
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
        return self._result(time.perf_counter() - started, self.clock.now)

    def _run_due(self, now: float) -> bool:
        """Run the scheduling cycle or autoscaler pass due before ``now`` (a cycle first)."""
        cycle, scale = self.clock.next_cycle, self.clock.next_scale
        if cycle is not None and cycle < now and (scale is None or cycle <= scale):
            self._cycle(cycle)
            return True
        if scale is not None and scale < now:
            self._scale(scale)
            return True
        return False

    def _arrive(self, state: _Job) -> None:
        if self.fleet is not None and not self.fleet.could_ever_fit(self._request(state)):
            state.record.never_reason = (
                f"{ReasonCode.NEVER_FITS}: larger than the cluster with every pool at its max"
            )
            return
        self._enqueue(state)

    def _enqueue(self, state: _Job) -> None:
        job_id = state.job.job_id
        self.waiting[job_id] = state
        self.queue[job_id] = self._request(state)
        self.free.job_waits(state.job)

    def _dequeue(self, job_id: str) -> _Job:
        state = self.waiting.pop(job_id)
        del self.queue[job_id]
        self.free.job_leaves(state.job)
        return state

    def _event(self, event: tuple[float, int, int, str, int], now: float) -> bool:
        _, kind, _, job_id, epoch = event
        if kind == JOIN:
            return self._join(job_id, now)
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
            if self.aging.aging:  # back in the queue, at its level even if it ran protected
                self.aging.reprice(state, state.attained_gpu_s, running=False)
            self._enqueue(state)
        return True

    def _push(self, at: float, kind: int, state: _Job) -> None:
        heapq.heappush(self.events, (at, kind, next(self.seq), state.job.job_id, state.epoch))

    def _cycle(self, now: float) -> None:
        self.clock.next_cycle = None
        self.clock.now = now
        for state in self.aging.due(now, self.running):
            self._priority_changed(state)
        snapshot = ClusterSnapshot(self.nodes, tuple(self.queue.values()), self._held(), self.vcs)
        if self.config.check_invariants:
            jobs = (*self.waiting.values(), *self.running.values())
            check_priorities(snapshot, self.aging.rescan(now, jobs, self.running), now)
        tick = time.perf_counter()
        plan = schedule(snapshot, now, cache=self.cache)  # unbounded: every job, every cycle
        self.clock.scheduling_s += time.perf_counter() - tick
        self.clock.cycles += 1
        self.clock.last_plan = plan
        self._apply(plan, now)
        if self.fleet is not None and any(p.reason.code in CAPACITY_REASONS for p in plan.pending):
            self._want_scale(now)
        if self.config.check_invariants:
            check_allocations(self.nodes, self._held(), now)
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
            state = self._dequeue(admission.job_id)
            request = self._request(state)
            for placement in admission.placements:
                self.free.take(placement.node, placement.resources.gpu)
                self._pool_node_changed(placement.node, now)
            state.run_started = now
            if state.record.first_start_s is None:
                state.record.first_start_s = now
            state.epoch += 1
            self.running[admission.job_id] = state
            self._push(now + state.remaining_s, FINISH, state)
            self._push_demotion(state, now)
            state.allocations = tuple(allocation_for(request, p) for p in admission.placements)
            if self.aging.aging and self.aging.started(state, now):  # protected: its own now
                state.allocations = tuple(
                    replace(a, priority=state.priority) for a in state.allocations
                )
            self._hold(state.allocations)
        for preemption in plan.preemptions:
            self._preempt(self.running[preemption.victim_job_id], now)
        for never in plan.infeasible:
            if self._pools_may_serve(never.job_id, never.reason.code, now):
                continue  # stays queued: a pool can grow for it
            state = self._dequeue(never.job_id)
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
        if self.aging.aging:  # it stops at the level of the service it had
            self.aging.reprice(state, state.attained_gpu_s, running=True)
        state.allocations = tuple(
            replace(a, terminating=True, priority=state.priority) for a in state.allocations
        )
        self._hold(state.allocations)
        self._push(now + self.config.stop_s, STOPPED, state)

    def _release(self, state: _Job, now: float) -> None:
        del self.running[state.job.job_id]
        if not state.stopping:
            state.attained_gpu_s += (now - state.run_started) * state.job.gpus
        for alloc in state.allocations:
            self.free.give(alloc.node, alloc.resources.gpu)
            self._pool_node_changed(alloc.node, now)
            del self.allocations[(alloc.job_id, alloc.role, alloc.index)]
        self._held_cache = None
        state.allocations = ()
        state.epoch += 1

    def _hold(self, allocations: tuple[TaskAllocation, ...]) -> None:
        """Add or replace (in place: the order stays the order jobs started) allocations."""
        for alloc in allocations:
            self.allocations[(alloc.job_id, alloc.role, alloc.index)] = alloc
        self._held_cache = None

    def _push_demotion(self, state: _Job, now: float) -> None:
        """Aging: an event when the running job's service crosses its next threshold (a cycle
        then decides whether a job with less service should take its place)."""
        at = self.aging.demotion_at(state, now)
        if at is not None and at < state.run_started + state.remaining_s:
            self._push(at, DEMOTE, state)

    def _demote(self, state: _Job, now: float) -> bool:
        self._push_demotion(state, now)
        return bool(self.waiting)

    def _priority_changed(self, state: _Job) -> None:
        """A running job's service crossed a threshold: it holds its tasks at its new level."""
        state.request = None
        state.allocations = tuple(replace(a, priority=state.priority) for a in state.allocations)
        self._hold(state.allocations)

    def _held(self) -> tuple[TaskAllocation, ...]:
        """Every running task's allocation, copied only after tasks started or stopped."""
        if self._held_cache is None:
            self._held_cache = tuple(self.allocations.values())
        return self._held_cache

    def _sample(self, now: float, after_cycle: bool = False) -> None:
        if after_cycle:  # only a cycle can tell what waits for capacity; kept until the next
            self.fragmented = self.free.fragmented() if self.waiting else 0
        self.timeline.add(
            now, self.free.busy, len(self.waiting), len(self.running), self.fragmented
        )

    def _pools_may_serve(self, job_id: str, code: object, now: float) -> bool:
        if self.fleet is None or code not in CAPACITY_REASONS:
            return False
        if not self.fleet.could_ever_fit(self.queue[job_id]):
            return False
        self._want_scale(now)
        return True

    def _pool_node_changed(self, node: str, now: float) -> None:
        """A task started or ended on a pool node: the next pass updates its idle mark."""
        if self.fleet is not None and node in self.fleet.nodes:
            self._want_scale(now)

    def _want_scale(self, at: float, after: float | None = None) -> None:
        when = pass_at(at, self.config.autoscale_interval_s, after)
        if self.clock.next_scale is None or when < self.clock.next_scale:
            self.clock.next_scale = when

    def _scale(self, now: float) -> None:
        """One autoscaler pass: ``plan_scaling`` on the cluster as it is, applied."""
        assert self.fleet is not None
        self.clock.next_scale = None
        self.clock.now = now
        snapshot = ClusterSnapshot(self.nodes, tuple(self.queue.values()), self._held(), self.vcs)
        last = self.clock.last_plan
        waiting = {p.job_id: p.reason.code for p in last.pending}
        waiting.update((i.job_id, i.reason.code) for i in last.infeasible)
        busy = {a.node for a in snapshot.allocations}
        change = self.fleet.apply(self.fleet.plan(snapshot, waiting, now), now, busy)
        for at, request_id in change.boots:
            heapq.heappush(self.events, (at, JOIN, next(self.seq), request_id, 0))
        for name in change.removed:
            self.free.remove_node(name)
        if change.nodes_changed:
            self._nodes_changed()
        wake = self.fleet.wakeup(now)
        if wake is not None:
            self._want_scale(wake, after=now)

    def _join(self, request_id: str, now: float) -> bool:
        assert self.fleet is not None
        node = self.fleet.join(request_id)
        if node is None:
            return False  # terminated before it joined
        self.free.add_node(node)
        self._nodes_changed()
        self._want_scale(now)  # its idle mark
        return True

    def _nodes_changed(self) -> None:
        assert self.fleet is not None
        self.nodes = (*self.cluster.nodes, *self.fleet.nodes.values())

    def _pool_usage(self, end: float) -> tuple[PoolUsage, ...]:
        if self.fleet is not None:
            return self.fleet.close(end)
        done = [s.record.end_s for s in self.jobs if s.record.end_s is not None]
        start = min((s.job.submit_s for s in self.jobs), default=0.0)
        return always_on_usage(self.cluster.always_on, max(done, default=start) - start)

    def _result(self, wall_s: float, end: float) -> SimResult:
        last = self.clock.last_plan
        reasons = {p.job_id: f"{p.reason.code}: {p.reason.message}" for p in last.pending}
        reasons.update((i.job_id, f"{i.reason.code}: {i.reason.message}") for i in last.infeasible)
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
            pools=self._pool_usage(end),
        )
