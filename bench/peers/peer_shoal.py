"""shoal local mode, measured with bench/launch.py's own ``measure_latency`` / ``measure_drain``.

The cluster is started as bench/launch.py starts it: one simulated node with ``slots`` cores, in a
temporary SHOAL_HOME, server and agent on loopback. "Running" here: the task's ``startedAt``, the
agent's wall-clock time right after ``Popen`` of the task's shell returned (fork + exec done).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
# bench/launch.py and the modules it imports beside it (launch_containers.py), as when it runs as
# a script; appended, so that bench/kubernetes.py never shadows the kubernetes package
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))

from peer_proc import log, run  # noqa: E402

import launch  # noqa: E402  bench/launch.py
from shoal.client import ShoalClient  # noqa: E402
from shoal.local.supervisor import stop_local  # noqa: E402


def machine_summary() -> str:
    return str(launch.machine())


def version() -> str:
    root = BENCH.parent
    out = run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], check=False, timeout=30)
    dirty = run(["git", "-C", str(root), "status", "--porcelain", "src"], check=False, timeout=30)
    commit = out.stdout.strip() or "unknown"
    return f"shoal {commit}" + (" (src/ modified)" if dirty.stdout.strip() else "")


def measure(args, scratch: Path) -> dict:
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-peers-", dir=scratch))
    client = ShoalClient(*launch.start_cluster(home, args.slots))
    try:
        log(f"shoal: up; warm-up job, then {args.latency_jobs} latency jobs")
        launch.measure_latency(client, 1)
        latencies = launch.measure_latency(client, args.latency_jobs)
        log(f"shoal: draining {args.drain_jobs} jobs")
        drain_s, submit_s, succeeded = launch.measure_drain(client, args.drain_jobs)
        log(f"shoal: draining {args.drain_jobs} jobs as one array, at most {args.slots} at once")
        array = launch.measure_drain_array(client, args.drain_jobs, args.slots)
    finally:
        client.close()
        stop_local(home)
    return {
        "version": version(),
        "latencies": latencies,
        "drain_seconds": drain_s,
        "submit_seconds": submit_s,
        "drain_succeeded": succeeded,
        "array_drain_seconds": array[0],
        "array_submit_seconds": array[1],
        "array_drain_succeeded": array[2],
        "array_how": f"shoal job submit --array 0-{args.drain_jobs - 1}%{args.slots}",
        "running_means": "the task's startedAt: the agent's clock right after Popen returned",
    }
