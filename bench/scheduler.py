"""Benchmark of ``shoal.core.scheduler.schedule`` on large synthetic GPU clusters.

Run with ``make bench`` or ``.venv/bin/python bench/scheduler.py [--nodes 1000,5000] [--jobs 10000]
[--cycles 30] [--seed 1] [--json FILE]``. Everything is generated in memory from a seeded
``random.Random``; node addresses are documentation-only (198.18.0.0/15) and nothing connects.

For each cluster size it measures:

1. a cold cycle: an empty cluster and the whole queue (every job queued at once);
2. steady-state cycles: after each cycle the admissions become running allocations, a random ~5%
   of running jobs finish and new jobs top the queue back up; every ``schedule()`` call is timed;
3. memory: tracemalloc peak while building the snapshot and running one cold cycle, and the
   process's peak RSS.

Only ``schedule()`` itself is inside the timers; building snapshots and checking plans are not.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from shoal.core.plan import Plan
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    TaskAllocation,
    allocation_for,
)
from workload import JobFactory, make_nodes

FINISH_FRACTION = 0.05
# Published numbers, NOT measured by this script (context only).
REFERENCES = (
    (
        "kube-scheduler CI floor, SchedulingBasic 5000Nodes_10000Pods",
        "680 pods/s",
        "kubernetes/kubernetes test/integration/scheduler_perf/misc/performance-config.yaml",
    ),
    (
        "kube-scheduler CI floor, extended (GPU-like) resources, 5000 nodes",
        "180 pods/s",
        "same file, SchedulingWithExtendedResource/5000pods_5000nodes",
    ),
    (
        "Kueue end-to-end admission",
        "~43 workloads/s",
        "figure quoted in the shoal benchmark brief",
    ),
)


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
    if accounted != len(queue):
        raise AssertionError(f"plan accounts for {accounted} of {len(queue)} queued jobs")
    return tasks


@dataclass
class LiveCluster:
    """What a server would hold between cycles: the queue and the running allocations."""

    nodes: tuple[NodeState, ...]
    factory: JobFactory
    queue_target: int
    queue: dict[str, JobRequest] = field(default_factory=dict)
    running: dict[str, list[TaskAllocation]] = field(default_factory=dict)
    running_jobs: dict[str, JobRequest] = field(default_factory=dict)
    preempted: int = 0

    def snapshot(self) -> ClusterSnapshot:
        allocations = tuple(a for allocs in self.running.values() for a in allocs)
        return ClusterSnapshot(self.nodes, tuple(self.queue.values()), allocations)

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
# Measurements
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    wall: float  # what the brief asks for: elapsed seconds of one schedule() call
    cpu: float  # this process's CPU seconds; wall >> cpu means the machine was contended


def timed_schedule(snapshot: ClusterSnapshot, now: float) -> tuple[Plan, Timing]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    plan = schedule(snapshot, now)
    return plan, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (with 30 samples, p99 is the maximum)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def run_cold(cluster: LiveCluster, repeats: int) -> dict[str, Any]:
    """A cycle on an empty cluster with the whole queue, ``repeats`` times on the same snapshot
    (schedule() is pure, so every run must return the same plan); the admissions then start."""
    snapshot = cluster.snapshot()
    plan, timing = timed_schedule(snapshot, now=0.0)
    runs = [timing]
    for _ in range(repeats - 1):
        again, timing = timed_schedule(snapshot, now=0.0)
        if again != plan:
            raise AssertionError("schedule() returned a different plan for the same snapshot")
        runs.append(timing)
    tasks = check_plan(plan, cluster.queue)
    cluster.apply(plan)
    cluster.check_capacity()
    median = percentile([t.wall for t in runs], 0.5)
    return {
        "seconds": median,
        "cpu_seconds": percentile([t.cpu for t in runs], 0.5),
        "runs_seconds": [t.wall for t in runs],
        "queued": len(snapshot.queue),
        "admitted": len(plan.admissions),
        "tasks_placed": tasks,
        "pending": len(plan.pending),
        "infeasible": len(plan.infeasible),
        "admitted_per_second": len(plan.admissions) / median,
        "distinct_shapes": len({job.shape() for job in snapshot.queue}),
        "gpus_in_use": cluster.gpus_in_use(),
    }


def run_steady(cluster: LiveCluster, cycles: int, rng: random.Random) -> dict[str, Any]:
    """``cycles`` live-loop cycles: finish ~5%, top up the queue, schedule, start admissions."""
    latencies: list[float] = []
    cpu: list[float] = []
    admitted = tasks = finished = 0
    allocations: list[int] = []
    for cycle in range(1, cycles + 1):
        finished += cluster.finish_some(rng, FINISH_FRACTION)
        cluster.top_up()
        snapshot = cluster.snapshot()
        allocations.append(len(snapshot.allocations))
        plan, timing = timed_schedule(snapshot, now=float(cycle))
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
        "max_seconds": max(latencies),
        "mean_seconds": total / cycles,
        "admitted": admitted,
        "tasks_placed": tasks,
        "finished": finished,
        "preempted": cluster.preempted,
        "admitted_per_second": admitted / total if total else 0.0,
        "mean_running_allocations": sum(allocations) / cycles,
        "gpus_in_use_at_end": cluster.gpus_in_use(),
        "latencies_seconds": latencies,
        "cpu_seconds": cpu,
    }


def measure_memory(size: int, jobs: int, seed: int) -> dict[str, float]:
    """tracemalloc peak for building nodes + queue + snapshot and running one cold cycle."""
    gc.collect()
    tracemalloc.start()
    nodes = make_nodes(size)
    queue = tuple(JobFactory(random.Random(seed)).jobs(jobs))
    snapshot = ClusterSnapshot(nodes, queue)
    snapshot_bytes, _ = tracemalloc.get_traced_memory()
    plan = schedule(snapshot, now=0.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del plan, snapshot
    return {"snapshot_mib": snapshot_bytes / 2**20, "peak_mib": peak / 2**20}


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform != "darwin" else rss / 2**20


def bench_size(size: int, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    console.print(f"[bold]{size} nodes[/]: generating {args.jobs} jobs (seed {args.seed})")
    rng = random.Random(args.seed)
    factory = JobFactory(rng)
    cluster = LiveCluster(make_nodes(size), factory, args.jobs)
    cluster.top_up()
    cold = run_cold(cluster, args.repeat)
    runs = ", ".join(f"{t:.2f}" for t in cold["runs_seconds"])
    console.print(f"  cold cycle runs {runs} s; {cold['admitted']} admitted")
    steady = run_steady(cluster, args.cycles, random.Random(args.seed + 1))
    console.print(
        f"  {args.cycles} steady cycles, p50 {steady['p50_seconds'] * 1000:.0f} ms, "
        f"max {steady['max_seconds'] * 1000:.0f} ms"
    )
    del cluster
    memory = measure_memory(size, args.jobs, args.seed) if args.memory else {}
    memory["peak_rss_mib_so_far"] = peak_rss_mib()
    return {"nodes": size, "jobs": args.jobs, "cold": cold, "steady": steady, "memory": memory}


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    """Output of a read-only git command in the repository ("" if git is unavailable)."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, env=env, capture_output=True, text=True, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def core_version() -> str:
    """The commit benchmarked, marked if src/shoal/core differs from it."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("diff", "--name-only", "HEAD", "--", "src/shoal/core")
    return f"{commit} (src/shoal/core modified)" if dirty else commit


def machine_info() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "shoal_core": core_version(),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _range(runs: list[float]) -> str:
    return f"{min(runs):.2f} / {max(runs):.2f} s"


def _mib(memory: dict[str, float], key: str) -> str:
    return f"{memory[key]:,.1f} MiB" if key in memory else "skipped"


# (label, section of a per-size result, how to render it)
TABLE_ROWS: tuple[tuple[str, str, Callable[[dict[str, Any]], str]], ...] = (
    ("cold: cycle wall time (median)", "cold", lambda c: f"{c['seconds']:.2f} s"),
    ("cold: fastest / slowest run", "cold", lambda c: _range(c["runs_seconds"])),
    ("cold: CPU time (median)", "cold", lambda c: f"{c['cpu_seconds']:.2f} s"),
    ("cold: jobs admitted", "cold", lambda c: f"{c['admitted']:,}"),
    ("cold: tasks placed", "cold", lambda c: f"{c['tasks_placed']:,}"),
    ("cold: gang jobs admitted/s", "cold", lambda c: f"{c['admitted_per_second']:,.0f}"),
    ("cold: pending / infeasible", "cold", lambda c: f"{c['pending']:,} / {c['infeasible']:,}"),
    ("cold: GPUs in use after", "cold", lambda c: f"{c['gpus_in_use']:,}"),
    ("steady: cycles", "steady", lambda s: str(s["cycles"])),
    ("steady: mean running tasks", "steady", lambda s: f"{s['mean_running_allocations']:,.0f}"),
    ("steady: p50 cycle", "steady", lambda s: _ms(s["p50_seconds"])),
    ("steady: p50 cycle, CPU time", "steady", lambda s: _ms(s["p50_cpu_seconds"])),
    ("steady: p99 cycle", "steady", lambda s: _ms(s["p99_seconds"])),
    ("steady: max cycle", "steady", lambda s: _ms(s["max_seconds"])),
    ("steady: jobs admitted (all cycles)", "steady", lambda s: f"{s['admitted']:,}"),
    ("steady: jobs preempted (all cycles)", "steady", lambda s: f"{s['preempted']:,}"),
    ("steady: admitted/s in schedule()", "steady", lambda s: f"{s['admitted_per_second']:,.0f}"),
    ("tracemalloc: snapshot", "memory", lambda m: _mib(m, "snapshot_mib")),
    ("tracemalloc: snapshot + 1 cold cycle, peak", "memory", lambda m: _mib(m, "peak_mib")),
    ("process peak RSS so far", "memory", lambda m: _mib(m, "peak_rss_mib_so_far")),
)


def results_table(results: list[dict[str, Any]]) -> Table:
    table = Table(title="shoal schedule() benchmark (measured in this run)")
    table.add_column("metric")
    for result in results:
        table.add_column(f"{result['nodes']:,} nodes", justify="right")
    table.add_row("queued gang jobs", *(f"{r['jobs']:,}" for r in results))
    for label, section, render in TABLE_ROWS:
        table.add_row(label, *(render(r[section]) for r in results))
    return table


def reference_table() -> Table:
    table = Table(title="Published numbers for context (NOT measured in this run)")
    table.add_column("system / test")
    table.add_column("throughput", justify="right")
    table.add_column("source", overflow="fold")
    for row in REFERENCES:
        table.add_row(*row)
    return table


def report(console: Console, machine: dict[str, Any], results: list[dict[str, Any]]) -> None:
    console.print()
    console.print(
        f"Machine: {machine['cpu_model']}, {machine['cpu_count']} cores, "
        f"{machine['implementation']} {machine['python']}, {machine['platform']}"
    )
    console.print(f"shoal commit: {machine['shoal_core']}")
    console.print(results_table(results))
    console.print(reference_table())
    console.print(
        "Throughput here is one pure in-process schedule() call per cycle (no API server, no "
        "binding, no I/O); the published numbers are end-to-end systems and are not comparable "
        "one for one. A shoal admission is a whole gang (1-33 tasks)."
    )


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes",
        default="1000,5000",
        type=lambda text: [int(part) for part in text.split(",") if part],
        help="comma-separated cluster sizes (default 1000,5000)",
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="queue length (default 10000)")
    parser.add_argument("--cycles", type=int, default=30, help="steady-state cycles (default 30)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs of the cold cycle (default 3)"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument(
        "--no-memory",
        dest="memory",
        action="store_false",
        help="skip the tracemalloc pass (it re-runs one cold cycle under tracing)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.cycles < 1 or args.jobs < 1 or not args.nodes:
        parser.error("--repeat, --cycles, --jobs and --nodes must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    machine = machine_info()
    started = time.perf_counter()
    results = [bench_size(size, args, console) for size in args.nodes]
    elapsed = time.perf_counter() - started
    report(console, machine, results)
    console.print(f"Total benchmark wall time: {elapsed:.0f} s")
    if args.json:
        payload = {
            "machine": machine,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "results": results,
            "references_not_measured": [
                {"what": what, "throughput": value, "source": source}
                for what, value, source in REFERENCES
            ],
            "total_seconds": elapsed,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
