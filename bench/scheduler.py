"""Benchmark of ``shoal.core.scheduler.schedule`` on large synthetic GPU clusters (issue #5).

Run ``.venv/bin/python bench/scheduler.py`` (about 10 minutes on 2 cores) or with ``--quick``
(about a minute). Everything is generated in memory from a seeded ``random.Random``; node
addresses are documentation-only (198.18.0.0/15) and nothing connects.

For each cluster size (1,000 / 5,000 / 10,000 nodes of 8 GPUs), with 50,000 queued gang jobs of
mixed shapes across 20 virtual clusters, in a fresh process per size:

1. a cold cycle: an empty cluster and the whole queue; gang jobs admitted per second;
2. steady-state cycles: after each cycle the admissions start, preemption victims stop and
   requeue, ~5% of running jobs finish and new jobs top the queue back up; p50/p99 latency;
3. memory: the size of the snapshot's objects and the process's peak RSS.

Then the cost of one cycle as the queue grows at a fixed node count, with fitted slopes, and a
cProfile of one cold and one steady cycle at 5,000 nodes. Results go to the console (rich
tables), to ``bench/results/scheduler.json`` and between the scheduler markers of
``docs/benchmarks.md``. See docs/benchmarks.md for what is measured and how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rich.console import Console

from sched_live import (
    LiveCluster,
    deep_size,
    peak_rss_mib,
    profile_cycle,
    run_cold,
    run_scaling,
    run_steady,
)
from sched_report import (
    ROOT,
    machine_info,
    machine_section,
    markdown,
    print_sections,
    profile_sections,
    reference_section,
    replace_region,
    results_section,
    scaling_section,
    targets_section,
)
from shoal.core.budget import Budget
from shoal.core.cache import SchedulerCache

FULL = {
    "nodes": "1000,5000,10000",
    "jobs": 50_000,
    "cycles": "1000:10,5000:4,10000:2",
    "repeat": 3,
    "scaling_nodes": 1000,
    "scaling_jobs": "1000,5000,10000,25000,50000",
    "scaling_cycles": 3,
    "profile_nodes": 5000,
    "json": ROOT / "bench" / "results" / "scheduler.json",
}
QUICK = {
    "nodes": "200,1000",
    "jobs": 5_000,
    "cycles": "3",
    "repeat": 1,
    "scaling_nodes": 200,
    "scaling_jobs": "500,1000,2000,5000",
    "scaling_cycles": 2,
    "profile_nodes": 1000,
    "json": ROOT / "bench" / "results" / "scheduler-quick.json",
}
DOCS = ROOT / "docs" / "benchmarks.md"
console = Console()


def log(message: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {message}", highlight=False)


# --------------------------------------------------------------------------------------------
# One cluster size (run in its own process, so that its peak RSS is its own)
# --------------------------------------------------------------------------------------------


def bench_size(size: int, args: dict[str, Any]) -> dict[str, Any]:
    base_rss = peak_rss_mib()
    jobs, vcs, seed = args["jobs"], args["vcs"], args["seed"]
    log(f"[bold]{size:,} nodes[/]: {jobs:,} queued jobs, {vcs} virtual clusters (seed {seed})")
    cluster = LiveCluster.create(size, jobs, vcs, seed)
    cold_size = deep_size(cluster.snapshot())
    profile: dict[str, Any] = {}
    if size == args["profile_nodes"]:
        # the first bounded cycle on the empty cluster, with its own fresh cache, no deadline
        profile["cold"] = profile_cycle(
            cluster.snapshot(), now=0.0, cache=SchedulerCache(), budget=Budget()
        )
    cold = run_cold(cluster, args["repeat"])
    log(
        f"  cold: {cold['cycles']} cycles, {cold['seconds']:.2f} s "
        f"(CPU {cold['cpu_seconds']:.2f} s), {cold['admitted']:,} "
        f"admitted ({cold['admitted_per_second']:,.0f}/s), longest "
        f"{cold['max_cycle_seconds'] * 1000:.0f} ms"
    )
    cycles = args["cycles"](size)
    steady = run_steady(cluster, cycles, random.Random(seed + 1))
    log(
        f"  {cycles} steady cycles: p50 {steady['p50_seconds']:.2f} s, "
        f"max {steady['max_seconds']:.2f} s, {steady['preempted']:,} preempted"
    )
    assert cluster.last is not None
    steady_size = deep_size(cluster.last)
    if profile:  # the last steady cycle again (an equal snapshot), under the profiler
        profile["steady"] = profile_cycle(
            cluster.last,
            now=float(cycles),
            cache=cluster.cache,
            budget=Budget(),
            resume_from=cluster.resume_from,
        )
        profile["nodes"] = size
        log(
            f"  profiled: cold {profile['cold']['total_seconds']:.1f} s, steady "
            f"{profile['steady']['total_seconds']:.1f} s (cProfile slows a cycle 2-3×)"
        )
    memory = {
        "snapshot_cold_mib": cold_size / 2**20,
        "snapshot_steady_mib": steady_size / 2**20,
        "peak_rss_mib": peak_rss_mib(),
        "base_rss_mib": base_rss,
    }
    result = {"nodes": size, "jobs": jobs, "vcs": vcs, "cold": cold, "steady": steady}
    return result | {"memory": memory, "profile": profile}


def scaling(args: dict[str, Any]) -> dict[str, Any]:
    nodes, sizes = args["scaling_nodes"], args["scaling_jobs"]
    log(f"[bold]queue sweep[/] at {nodes:,} nodes: {', '.join(f'{n:,}' for n in sizes)} jobs")
    return run_scaling(nodes, sizes, args["vcs"], args["seed"], args["scaling_cycles"], log)


def in_child(function: Callable[..., dict[str, Any]], *arguments: Any) -> dict[str, Any]:
    """Run ``function`` in a fresh interpreter (spawned, so nothing is inherited)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(function, *arguments).result()


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


class Cycles:
    """``--cycles``: one count for every size ("5") or per size ("1000:12,5000:6")."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.per_size: dict[int, int] = {}
        self.default = 0
        for part in text.split(","):
            size, _, count = part.rpartition(":")
            if size:
                self.per_size[int(size)] = int(count)
            self.default = int(count)

    def __call__(self, size: int) -> int:
        return self.per_size.get(size, self.default)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--nodes", help=f"cluster sizes (default {FULL['nodes']})")
    parser.add_argument("--jobs", type=int, help=f"queue length (default {FULL['jobs']})")
    parser.add_argument("--vcs", type=int, default=20, help="virtual clusters; 0: none")
    parser.add_argument("--cycles", help=f"steady cycles, per size (default {FULL['cycles']})")
    parser.add_argument("--repeat", type=int, help="timed cold-cycle runs (default 3)")
    parser.add_argument("--scaling-nodes", type=int, help="node count of the queue sweep")
    parser.add_argument("--scaling-jobs", help=f"queue lengths (default {FULL['scaling_jobs']})")
    parser.add_argument("--scaling-cycles", type=int, help="steady cycles per queue length")
    parser.add_argument("--profile-nodes", type=int, help="size to profile (0: none)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--json", type=Path, help="results file (default bench/results/)")
    parser.add_argument(
        "--docs",
        type=Path,
        help="Markdown file to update between the scheduler markers (default: "
        "docs/benchmarks.md for a full run, none with --quick)",
    )
    parser.add_argument("--no-docs", action="store_true", help="do not update any docs")
    parser.add_argument(
        "--render-only",
        type=Path,
        metavar="JSON",
        help="measure nothing: print the tables of a saved results file and update the docs",
    )
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.docs is None and not args.quick:
        args.docs = DOCS
    if args.no_docs:
        args.docs = None
    args.nodes, args.scaling_jobs = _ints(str(args.nodes)), _ints(str(args.scaling_jobs))
    args.cycles = Cycles(str(args.cycles))
    if min([args.repeat, args.jobs, *args.nodes, *(args.cycles(n) for n in args.nodes)]) < 1:
        parser.error("--repeat, --jobs, --nodes and --cycles must be positive")
    if args.vcs == 1:
        parser.error("--vcs: 0 (no virtual clusters) or at least 2 (default and a team)")
    return args


def intro(argv: list[str], elapsed: float, date: str) -> str:
    command = shlex.join([".venv/bin/python", "bench/scheduler.py", *argv])
    return (
        f"Generated by `{command}` on {date}; the whole run took {elapsed / 60:.1f} minutes of "
        "wall time. Do not edit between the scheduler markers: the script rewrites this part "
        "(`--render-only bench/results/scheduler.json` redraws it from the saved results). The "
        'analysis is in "Where the time goes" below.'
    )


def render(console_args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """Print the tables of ``payload`` and put its Markdown into the docs (if asked)."""
    machine, results, sweep = payload["machine"], payload["results"], payload["scaling"]
    sections = [machine_section(machine), results_section(results), targets_section(results)]
    sections.append(scaling_section(sweep))
    for result in results:
        if result["profile"]:
            sections += profile_sections(result["profile"])
    sections.append(reference_section())
    print_sections(console, sections)
    if console_args.docs is not None:
        text = intro(payload["command"], payload["total_seconds"], payload["date"])
        docs = console_args.docs
        docs.write_text(replace_region(docs.read_text(), markdown(sections, text)))
        log(f"updated {docs} between the scheduler markers")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render_only is not None:
        render(args, json.loads(args.render_only.read_text()))
        return 0
    machine = machine_info()
    started = time.perf_counter()
    plain = {k: v for k, v in vars(args).items() if k not in ("json", "docs", "render_only")}
    results = [in_child(bench_size, size, plain) for size in args.nodes]
    sweep = in_child(scaling, plain)
    elapsed = time.perf_counter() - started
    machine["load_average_end"] = os.getloadavg()
    log(f"total benchmark wall time: {elapsed:.0f} s")
    payload = {
        "machine": machine,
        "command": argv,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
        "scaling": sweep,
        "total_seconds": elapsed,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    log(f"wrote {args.json}")
    render(args, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
