"""Local-mode launch benchmark: submit → first task running, and draining 1,000 trivial jobs.

Starts a real local cluster (server + agent processes, SQLite, loopback HTTP) in a temporary
SHOAL_HOME, measures, and stops it. Usage:

    .venv/bin/python bench/launch.py [--latency-jobs 50] [--drain-jobs 1000] [--slots 20]
                                     [--drain-clients 4]

The drain is measured twice: first as the peers are (one client submitting one job per request,
one after the other, like ``sbatch`` per job or ``JobSubmissionClient.submit_job`` per job), then
with ``--drain-clients`` client threads submitting at once (still one job per request; 0 skips
it). The first is the honest comparison; the second shows how the server batches under load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

import launch_containers
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


def replace_region(doc: Path, begin: str, end: str, region: str) -> None:
    """Rewrite the part of ``doc`` between the ``begin`` and ``end`` markers (nothing else)."""
    text = doc.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{doc} has no {begin} ... {end} region")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    doc.write_text(f"{head}{begin}\n{region}\n{end}{tail}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_cluster(home: Path, slots: int) -> tuple[str, str]:
    """A local cluster in ``home`` with one node of ``slots`` cores and no GPU: its URL and
    admin token. The benchmark stops it with ``stop_local(home)``."""
    info = start_local(
        UpOptions(
            home=home,
            port=0,
            nodes=1,
            cpus=float(slots),
            memory_mib=64 * 1024,
            gpus=0,
            kill_grace_s=2.0,
        )
    )
    return info.url, (home / "admin.token").read_text().strip()


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


def measure_drain(
    client: ShoalClient,
    count: int,
    clients: int = 1,
    make_client: Callable[[], ShoalClient] | None = None,
    tag: str = "drain",
) -> tuple[float, float, int]:
    """Submit ``count`` trivial jobs back to back; time until every one has finished.

    With ``clients`` > 1, that many threads (each with its own client from ``make_client``)
    submit their share at once, each still one job per request."""
    start = time.time()
    if clients <= 1 or make_client is None:
        ids = [client.submit(TRIVIAL.format(name=f"{tag}-{i}"))[0]["id"] for i in range(count)]
    else:
        ids = _submit_concurrently(make_client, count, clients, tag)
    submitted = time.time() - start
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:  # a cheap poll: job counts by state
        counts = client.cluster()["jobs"]
        if counts["WAITING"] + counts["RUNNING"] + counts["STOPPING"] == 0:
            break
        time.sleep(0.05)
    elapsed = time.time() - start
    finished = client.jobs(["SUCCEEDED"], limit=10000)
    wanted = set(ids)
    succeeded = sum(1 for j in finished if j["id"] in wanted)
    return elapsed, submitted, succeeded


def measure_drain_array(
    client: ShoalClient, count: int, slots: int, tag: str = "drain-array"
) -> tuple[float, float, int]:
    """The same ``count`` trivial jobs as one array with at most ``slots`` elements at once
    (``shoal job submit --array 0-{count-1}%{slots}``): one request; time until every element
    has finished (polled as ``measure_drain`` does), and how many succeeded."""
    start = time.time()
    (parent,) = client.submit(TRIVIAL.format(name=tag), array=f"0-{count - 1}%{slots}")
    submitted = time.time() - start
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:  # the parent counts as active until its last element ends
        counts = client.cluster()["jobs"]
        if counts["WAITING"] + counts["RUNNING"] + counts["STOPPING"] == 0:
            break
        time.sleep(0.05)
    elapsed = time.time() - start
    detail = client.job(parent["id"])
    succeeded = sum(1 for e in detail["elements"] or [] if e["state"] == "SUCCEEDED")
    return elapsed, submitted, succeeded


def _submit_concurrently(
    make_client: Callable[[], ShoalClient], count: int, clients: int, tag: str
) -> list[str]:
    ids: list[list[str]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    own = [make_client() for _ in range(clients)]

    def work(k: int) -> None:
        try:
            for i in range(k, count, clients):
                ids[k].append(own[k].submit(TRIVIAL.format(name=f"{tag}-{i}"))[0]["id"])
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for extra in own:
        extra.close()
    if errors:
        raise errors[0]
    return [job_id for part in ids for job_id in part]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--drain-jobs", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=20, help="cores of the one simulated node")
    parser.add_argument(
        "--drain-clients", type=int, default=4, help="client threads of the second drain (0: skip)"
    )
    parser.add_argument(
        "--container-jobs", type=int, default=20, help="jobs of the container row (0: skip it)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    url, token = start_cluster(home, args.slots)
    client = ShoalClient(url, token)
    concurrent = None
    containers: dict[str, object] = {}
    try:
        if args.container_jobs > 0:  # first, on an idle cluster: the latencies it compares
            containers = launch_containers.measure(client, args.container_jobs)
        latencies = measure_latency(client, args.latency_jobs)
        drain_s, submit_s, succeeded = measure_drain(client, args.drain_jobs)
        if args.drain_clients > 0:
            concurrent = measure_drain(
                client,
                args.drain_jobs,
                args.drain_clients,
                lambda: ShoalClient(url, token),
                tag="drain-concurrent",
            )
    finally:
        stop_local(home)
    results: dict[str, object] = {
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
    if concurrent is not None:
        results |= {
            "drain_clients": args.drain_clients,
            "drain_concurrent_seconds": round(concurrent[0], 2),
            "drain_concurrent_jobs_per_second": round(args.drain_jobs / concurrent[0], 1),
            "drain_concurrent_submit_seconds": round(concurrent[1], 2),
            "drain_concurrent_succeeded": concurrent[2],
        }
    if containers:
        results["containers"] = containers
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    for key in ("drain_succeeded", "drain_concurrent_succeeded"):
        if key in results and results[key] != args.drain_jobs:
            raise SystemExit(f"{key}: only {results[key]} of {args.drain_jobs} jobs succeeded")


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
    if "drain_clients" in results:
        clients = results["drain_clients"]
        table.add_row(
            f"drain {results['drain_jobs']} jobs, {clients} clients submitting at once",
            f"{results['drain_concurrent_seconds']} s",
        )
        table.add_row(
            f"drain throughput, {clients} clients",
            f"{results['drain_concurrent_jobs_per_second']} jobs/s",
        )
        table.add_row("jobs that succeeded", str(results["drain_concurrent_succeeded"]))
    containers = results.get("containers")
    if isinstance(containers, dict):
        for label, value in launch_containers.rows(containers):
            table.add_row(label, value)
    console.print(table)
    console.print(
        "For context (published/measured elsewhere, not in this run): Slurm 22.05 here "
        "≈ 0.99 s submit→start and 8.1 s for 200 jobs on 20 slots; Ray Jobs ≈ 0.95 s "
        "submit→running (docs/ENVIRONMENT.md). Side-by-side peer runs: bench/peers/."
    )


if __name__ == "__main__":
    main()
