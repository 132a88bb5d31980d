"""The measurements of ``bench/scheduler.py``: a simulated live cluster around ``schedule()``, the
cold and steady-state cycles, the queue-length sweep, memory and a cProfile of one cycle.

Only ``schedule()`` itself is inside the timers; building snapshots and checking plans are not.
As in the server (server/model.py), the cluster keeps one ``SchedulerCache``, the node tuple stays
the same object while nodes do not change, and each cycle has the server's budget: a 40 ms
deadline (``CYCLE_DEADLINE_S``) and the default work limits of ``core.budget.Budget``, resuming
where the previous cycle stopped. A "cold" run is the cycles from an empty cluster until one
admits nothing and does not stop early; its throughput is jobs admitted per second of all those
cycles together.
"""

from __future__ import annotations

import cProfile
import gc
import math
import pstats
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from shoal.core.budget import Budget
from shoal.core.cache import SchedulerCache
from shoal.core.plan import Plan
from shoal.core.queueindex import QueueKey
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    TaskAllocation,
    VirtualCluster,
    allocation_for,
)
from workload import GPUS_PER_NODE, JobFactory, make_nodes, make_virtual_clusters

FINISH_FRACTION = 0.05
CYCLE_DEADLINE_S = 0.040  # the server's default (ServerSettings.cycle_deadline_ms)
MAX_COLD_CYCLES = 2_000
PROFILE_ROWS = 15


# --------------------------------------------------------------------------------------------
# Plan checks and the simulated cluster state
# --------------------------------------------------------------------------------------------


def check_plan(plan: Plan, queue: dict[str, JobRequest]) -> int:
    """Light sanity checks; returns the number of tasks placed. Raises on nonsense."""
    seen: set[str] = set()
    tasks = 0
    for admission in plan.admissions:
        job = queue.get(admission.job_id)
        if job is None or admission.job_id in seen:
            raise AssertionError(f"admitted unknown or duplicate job {admission.job_id}")
        if len(admission.placements) != job.task_count:
            raise AssertionError(
                f"{admission.job_id}: {len(admission.placements)} placements, "
                f"{job.task_count} tasks"
            )
        seen.add(admission.job_id)
        tasks += job.task_count
    accounted = len(plan.admissions) + len(plan.pending) + len(plan.infeasible)
    if accounted != plan.examined:
        raise AssertionError(f"plan accounts for {accounted} of {plan.examined} examined jobs")
    return tasks


@dataclass
class LiveCluster:
    """What a server would hold between cycles: the queue and the running allocations."""

    nodes: tuple[NodeState, ...]
    factory: JobFactory
    queue_target: int
    virtual_clusters: tuple[VirtualCluster, ...] = ()
    queue: dict[str, JobRequest] = field(default_factory=dict)
    running: dict[str, list[TaskAllocation]] = field(default_factory=dict)
    running_jobs: dict[str, JobRequest] = field(default_factory=dict)
    preempted: int = 0
    last: ClusterSnapshot | None = None  # the last snapshot scheduled in the live loop
    cache: SchedulerCache = field(default_factory=SchedulerCache)
    resume_from: QueueKey | None = None

    @classmethod
    def create(cls, nodes: int, jobs: int, vcs: int, seed: int) -> LiveCluster:
        """``nodes`` 8-GPU nodes, ``vcs`` virtual clusters (0: one shared queue) and a full
        queue of ``jobs`` jobs drawn from ``random.Random(seed)``."""
        quotas, demand = make_virtual_clusters(nodes * GPUS_PER_NODE, vcs) if vcs else ((), ())
        cluster = cls(make_nodes(nodes), JobFactory(random.Random(seed), demand), jobs, quotas)
        cluster.top_up()
        return cluster

    def snapshot(self) -> ClusterSnapshot:
        allocations = tuple(a for allocs in self.running.values() for a in allocs)
        queue = tuple(self.queue.values())
        return ClusterSnapshot(self.nodes, queue, allocations, self.virtual_clusters)

    def apply(self, plan: Plan) -> None:
        """Admissions start running; infeasible jobs are rejected (leave the queue); preemption
        victims stop at once and go back to the queue with their submission time."""
        for admission in plan.admissions:
            job = self.queue.pop(admission.job_id)
            self.running_jobs[job.job_id] = job
            self.running[job.job_id] = [allocation_for(job, p) for p in admission.placements]
        for never in plan.infeasible:
            del self.queue[never.job_id]
        for preemption in plan.preemptions:
            del self.running[preemption.victim_job_id]
            victim = self.running_jobs.pop(preemption.victim_job_id)
            self.queue[victim.job_id] = victim
            self.preempted += 1

    def finish_some(self, rng: random.Random, fraction: float) -> int:
        """A random ``fraction`` of running jobs finish and release their allocations."""
        count = round(len(self.running) * fraction)
        for job_id in rng.sample(list(self.running), count):
            del self.running[job_id]
            del self.running_jobs[job_id]
        return count

    def top_up(self) -> int:
        missing = self.queue_target - len(self.queue)
        for job in self.factory.jobs(missing):
            self.queue[job.job_id] = job
        return missing

    def check_capacity(self) -> None:
        """No node is oversubscribed and no GPU is handed out twice."""
        used: dict[str, ResourceVector] = {}
        gpus: set[tuple[str, int]] = set()
        for allocs in self.running.values():
            for alloc in allocs:
                used[alloc.node] = used.get(alloc.node, ResourceVector()) + alloc.resources
                for gpu in alloc.gpu_indices:
                    if (alloc.node, gpu) in gpus:
                        raise AssertionError(f"GPU {gpu} of {alloc.node} allocated twice")
                    gpus.add((alloc.node, gpu))
        capacity = {n.name: n.capacity for n in self.nodes}
        for node, total in used.items():
            if not total.fits_in(capacity[node]):
                raise AssertionError(f"{node} oversubscribed: {total} > {capacity[node]}")

    def gpus_in_use(self) -> int:
        return sum(a.resources.gpu for allocs in self.running.values() for a in allocs)


# --------------------------------------------------------------------------------------------
# Timed cycles
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    wall: float  # elapsed seconds of one schedule() call
    cpu: float  # this process's CPU seconds; wall >> cpu means the machine was contended


def timed_schedule(
    snapshot: ClusterSnapshot, now: float, cluster: LiveCluster | None = None
) -> tuple[Plan, Timing]:
    """One cycle; with ``cluster``, bounded as the server runs it (its cache, its resume point,
    the deadline), else the unbounded cycle on a fresh cache."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    if cluster is None:
        plan = schedule(snapshot, now)
    else:
        limit = wall + CYCLE_DEADLINE_S
        budget = Budget(deadline=lambda: time.perf_counter() >= limit)
        plan = schedule(
            snapshot, now, cache=cluster.cache, budget=budget, resume_from=cluster.resume_from
        )
        cluster.resume_from = plan.resume_from
    return plan, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (with fewer than 100 samples, p99 is the maximum)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def fresh(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """An equal snapshot in new tuples (as the next cycle of a server would build it)."""
    return ClusterSnapshot(
        (*snapshot.nodes,),
        snapshot.queue,
        (*snapshot.allocations,),
        snapshot.virtual_clusters,
    )


def run_cold(cluster: LiveCluster, repeats: int) -> dict[str, Any]:
    """From an empty cluster with the whole queue: bounded cycles (admissions start after each)
    until a cycle admits nothing and did not stop early. The first cycle (without a deadline)
    is checked to be deterministic first: equal plans on equal snapshots with fresh caches (not
    timed)."""
    snapshot = cluster.snapshot()
    if repeats > 1:
        first = schedule(snapshot, 0.0, cache=SchedulerCache(), budget=Budget())
        again = schedule(fresh(snapshot), 0.0, cache=SchedulerCache(), budget=Budget())
        if again != first:
            raise AssertionError("schedule() returned a different plan for an equal snapshot")
    runs: list[Timing] = []
    admitted = tasks = pending = infeasible = 0
    queued = len(snapshot.queue)
    idle_examined = 0  # jobs examined since the last admission
    last_admitting = 0
    for _ in range(MAX_COLD_CYCLES):
        plan, timing = timed_schedule(cluster.snapshot(), 0.0, cluster)
        tasks += check_plan(plan, cluster.queue)
        cluster.apply(plan)
        runs.append(timing)
        admitted += len(plan.admissions)
        pending, infeasible = len(plan.pending), infeasible + len(plan.infeasible)
        if plan.admissions:
            idle_examined, last_admitting = 0, len(runs)
        else:
            idle_examined += plan.examined
        if idle_examined >= len(cluster.queue):  # a whole sweep of the queue admitted nothing
            break
    runs = runs[: max(last_admitting, 1)]  # the cycles until the cluster was full
    cluster.check_capacity()
    wall = sum(t.wall for t in runs)
    return {
        "seconds": wall,
        "cpu_seconds": sum(t.cpu for t in runs),
        "cycles": len(runs),
        "max_cycle_seconds": max(t.wall for t in runs),
        "runs_seconds": [t.wall for t in runs],
        "queued": queued,
        "admitted": admitted,
        "tasks_placed": tasks,
        "pending": pending,
        "infeasible": infeasible,
        "admitted_per_second": admitted / wall,
        "distinct_shapes": len({job.shape() for job in snapshot.queue}),
        "gpus_in_use": cluster.gpus_in_use(),
    }


def run_steady(cluster: LiveCluster, cycles: int, rng: random.Random) -> dict[str, Any]:
    """``cycles`` live-loop cycles: finish ~5%, top up the queue, schedule, start admissions."""
    latencies: list[float] = []
    cpu: list[float] = []
    admitted = tasks = finished = 0
    preempted_before = cluster.preempted
    allocations: list[int] = []
    for cycle in range(1, cycles + 1):
        finished += cluster.finish_some(rng, FINISH_FRACTION)
        cluster.top_up()
        snapshot = cluster.last = cluster.snapshot()
        allocations.append(len(snapshot.allocations))
        plan, timing = timed_schedule(snapshot, float(cycle), cluster)
        tasks += check_plan(plan, cluster.queue)
        cluster.apply(plan)
        latencies.append(timing.wall)
        cpu.append(timing.cpu)
        admitted += len(plan.admissions)
    cluster.check_capacity()
    total = sum(latencies)
    return {
        "cycles": cycles,
        "p50_seconds": percentile(latencies, 0.50),
        "p50_cpu_seconds": percentile(cpu, 0.50),
        "p99_seconds": percentile(latencies, 0.99),
        "p99_cpu_seconds": percentile(cpu, 0.99),
        "max_seconds": max(latencies),
        "mean_seconds": total / cycles,
        "admitted": admitted,
        "tasks_placed": tasks,
        "finished": finished,
        "preempted": cluster.preempted - preempted_before,
        "admitted_per_second": admitted / total if total else 0.0,
        "mean_running_allocations": sum(allocations) / cycles,
        "gpus_in_use_at_end": cluster.gpus_in_use(),
        "latencies_seconds": latencies,
        "cpu_seconds": cpu,
    }


# --------------------------------------------------------------------------------------------
# Memory and profile
# --------------------------------------------------------------------------------------------


def deep_size(root: object) -> int:
    """Bytes of every object reachable from ``root`` (each counted once; types and modules not
    followed): the memory a snapshot holds, including shared strings and vectors once."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform != "darwin" else rss / 2**20


# Where a cycle's time goes, by cumulative time of these functions (they nest: shares overlap).
BREAKDOWN = (
    ("Cycle.__init__ (pool and quota set-up)", "core/cycle.py", "__init__"),
    ("Cycle.order (sorting, quota classes)", "core/cycle.py", "order"),
    ("Cycle._try (placement of new shapes)", "core/cycle.py", "_try"),
    ("Cycle._after_failure (VC: preempt or reserve)", "core/cycle.py", "_after_failure"),
    ("Cycle._preempt_for (choosing victims)", "core/cycle.py", "_preempt_for"),
    ("Cycle._simulate (what-if pools)", "core/cycle.py", "_simulate"),
    ("NodePool.__init__ (building pools)", "core/placement.py", "__init__"),
    ("NodePool.place_job", "core/placement.py", "place_job"),
    ("explain (why pending)", "core/diagnosis.py", "explain"),
    ("never_fits (could it ever fit?)", "core/scheduler.py", "never_fits"),
)


def profile_cycle(
    snapshot: ClusterSnapshot,
    now: float,
    cache: SchedulerCache | None = None,
    budget: Budget | None = None,
    resume_from: QueueKey | None = None,
) -> dict[str, Any]:
    """cProfile one schedule() call: the top functions by cumulative and by own time, and the
    share of the cycle in the functions of ``BREAKDOWN``."""
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    if budget is None:
        schedule(snapshot, now, cache=cache, resume_from=resume_from)
    else:
        schedule(snapshot, now, cache=cache, budget=budget, resume_from=resume_from)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (path, line, name), (_, calls, tottime, cumtime, _) in raw.items():
        where = "core/" + path.split("/core/")[-1] if "/shoal/core/" in path else path
        rows.append(
            {"function": f"{where}:{line} {name}", "calls": calls}
            | {"tottime": tottime, "cumtime": cumtime, "file": where, "name": name}
        )
    total = max((r["cumtime"] for r in rows if r["name"] == "schedule"), default=0.0)
    shares = {}
    for label, file, name in BREAKDOWN:
        spent = sum(r["cumtime"] for r in rows if r["file"] == file and r["name"] == name)
        shares[label] = spent / total if total else 0.0
    by_cum = sorted(rows, key=lambda r: -r["cumtime"])[:PROFILE_ROWS]
    by_own = sorted(rows, key=lambda r: -r["tottime"])[:10]
    keep = ("function", "calls", "tottime", "cumtime")
    return {
        "total_seconds": total,
        "top_cumulative": [{k: r[k] for k in keep} for r in by_cum],
        "top_own": [{k: r[k] for k in keep} for r in by_own],
        "shares": shares,
    }


# --------------------------------------------------------------------------------------------
# Queue-length sweep
# --------------------------------------------------------------------------------------------


def fit(sizes: list[int], seconds: list[float]) -> dict[str, float]:
    """Least-squares fits of cycle time against queue length: the exponent b of t = a * n^b
    (log-log; b <= 1 means no worse than linear) and the line t = c0 + c1 * n with its R^2."""
    xs, ys = [math.log(n) for n in sizes], [math.log(max(t, 1e-9)) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    exponent = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    mn, mt = sum(sizes) / len(sizes), sum(seconds) / len(seconds)
    sxx = sum((n - mn) ** 2 for n in sizes)
    slope = (
        sum((n - mn) * (t - mt) for n, t in zip(sizes, seconds, strict=True)) / sxx if sxx else 0.0
    )
    intercept = mt - slope * mn
    residual = sum((t - intercept - slope * n) ** 2 for n, t in zip(sizes, seconds, strict=True))
    spread = sum((t - mt) ** 2 for t in seconds)
    return {
        "exponent": exponent,
        "seconds_per_job": slope,
        "intercept_seconds": intercept,
        "r_squared": 1 - residual / spread if spread else 1.0,
    }


def run_scaling(
    nodes: int, sizes: list[int], vcs: int, seed: int, cycles: int, log: Any
) -> dict[str, Any]:
    """For each queue length: one cold cycle and ``cycles`` steady cycles at ``nodes`` nodes."""
    points = []
    for size in sizes:
        cluster = LiveCluster.create(nodes, size, vcs, seed)
        cold = run_cold(cluster, repeats=1)
        steady = run_steady(cluster, cycles, random.Random(seed + 1))
        point = {
            "queued": size,
            "cold_seconds": cold["seconds"],
            "cold_cpu_seconds": cold["cpu_seconds"],
            "steady_seconds": steady["p50_seconds"],
            "steady_cpu_seconds": steady["p50_cpu_seconds"],
            "cold_admitted": cold["admitted"],
            "steady_admitted": steady["admitted"],
            "steady_preempted": steady["preempted"],
        }
        points.append(point)
        log(
            f"  queue {size:,}: cold {cold['seconds']:.2f} s, steady p50 "
            f"{steady['p50_seconds']:.2f} s (CPU {steady['p50_cpu_seconds']:.2f} s)"
        )
    ns = [p["queued"] for p in points]
    return {
        "nodes": nodes,
        "cycles": cycles,
        "points": points,
        "fit_cold_cpu": fit(ns, [p["cold_cpu_seconds"] for p in points]),
        "fit_steady_cpu": fit(ns, [p["steady_cpu_seconds"] for p in points]),
    }
