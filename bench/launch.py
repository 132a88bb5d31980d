"""Local-mode launch benchmark: submit → first task running, and draining 1,000 trivial jobs.

Starts a real local cluster (server + agent processes, SQLite, loopback HTTP) in a temporary
SHOAL_HOME, measures, and stops it. Usage:

    .venv/bin/python bench/launch.py [--latency-jobs 50] [--drain-jobs 1000] [--slots 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shoal.client import ShoalClient
from shoal.local.supervisor import UpOptions, start_local, stop_local

TRIVIAL = (
    "version: 1\nname: {name}\nroles:\n  t:\n"
    "    resources: {{cpu: 1, memory: 64}}\n    command: 'true'\n"
)


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    python = platform.python_version()
    return f"{model}, {os.cpu_count()} cores, Python {python}, {platform.platform()}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure_latency(client: ShoalClient, count: int) -> list[float]:
    """Sequential jobs on an idle cluster: submit → the task's process has started."""
    latencies = []
    for i in range(count):
        submitted = time.time()
        job_id = client.submit(TRIVIAL.format(name=f"lat-{i}"))[0]["id"]
        while True:
            job = client.job(job_id)
            tasks = job["tasks"]
            if tasks and tasks[0]["startedAt"] is not None:
                latencies.append(tasks[0]["startedAt"] - submitted)
                break
            time.sleep(0.002)
        client.wait(job_id, poll_s=0.01)
    return latencies


def measure_drain(client: ShoalClient, count: int) -> tuple[float, float, int]:
    """Submit ``count`` trivial jobs back to back; time until every one has finished."""
    start = time.time()
    ids = [client.submit(TRIVIAL.format(name=f"drain-{i}"))[0]["id"] for i in range(count)]
    submitted = time.time() - start
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:  # a cheap poll: job counts by state
        counts = client.cluster()["jobs"]
        if counts["WAITING"] + counts["RUNNING"] + counts["STOPPING"] == 0:
            break
        time.sleep(0.05)
    elapsed = time.time() - start
    finished = client.jobs(["SUCCEEDED"], limit=10000)
    succeeded = sum(1 for j in finished if j["id"] in set(ids))
    return elapsed, submitted, succeeded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--drain-jobs", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=20, help="cores of the one simulated node")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    info = start_local(
        UpOptions(
            home=home,
            port=0,
            nodes=1,
            cpus=float(args.slots),
            memory_mib=64 * 1024,
            gpus=0,
            kill_grace_s=2.0,
        )
    )
    client = ShoalClient(info.url, (home / "admin.token").read_text().strip())
    try:
        latencies = measure_latency(client, args.latency_jobs)
        drain_s, submit_s, succeeded = measure_drain(client, args.drain_jobs)
    finally:
        stop_local(home)
    succeeded_ok = succeeded
    results = {
        "machine": machine(),
        "latency_jobs": len(latencies),
        "submit_to_running_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "submit_to_running_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "drain_jobs": args.drain_jobs,
        "drain_slots": args.slots,
        "drain_seconds": round(drain_s, 2),
        "drain_jobs_per_second": round(args.drain_jobs / drain_s, 1),
        "submit_seconds": round(submit_s, 2),
        "drain_succeeded": succeeded,
    }
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if succeeded_ok != args.drain_jobs:
        raise SystemExit(f"only {succeeded} of {args.drain_jobs} drain jobs succeeded")


def report(results: dict[str, object]) -> None:
    console = Console()
    console.print(f"machine: {results['machine']}")
    table = Table(title="shoal local mode: launch (measured in this run)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("submit → first task running, p50", f"{results['submit_to_running_p50_ms']} ms")
    table.add_row("submit → first task running, p99", f"{results['submit_to_running_p99_ms']} ms")
    table.add_row(
        f"drain {results['drain_jobs']} trivial jobs, {results['drain_slots']} slots",
        f"{results['drain_seconds']} s",
    )
    table.add_row("drain throughput", f"{results['drain_jobs_per_second']} jobs/s")
    table.add_row("time spent submitting (sequential POSTs)", f"{results['submit_seconds']} s")
    table.add_row("jobs that succeeded", str(results["drain_succeeded"]))
    console.print(table)
    console.print(
        "For context (published/measured elsewhere, not in this run): Slurm 22.05 here "
        "≈ 0.99 s submit→start and 8.1 s for 200 jobs on 20 slots; Ray Jobs ≈ 0.95 s "
        "submit→running (docs/ENVIRONMENT.md). Side-by-side peer runs: bench/peers/."
    )


if __name__ == "__main__":
    main()
