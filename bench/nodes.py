"""Server CPU per node at rest (issue #28 item 4; docs/benchmarks.md "Nodes at rest"): a real
``shoal server`` process (its scheduler in a process of its own) with N simulated nodes over
real HTTP on loopback, on SQLite and on PostgreSQL in the same run. Not a test: it prints a table,
writes bench/results/nodes.json and rewrites the region of docs/benchmarks.md between
``<!-- nodes:begin -->`` and ``<!-- nodes:end -->``.

    .venv/bin/python bench/nodes.py [--nodes 500,2000,5000] [--seconds 30] [--node-timeout 30]

Each simulated node (bench/node_load.py, in load processes of their own) does what an idle
``shoal agent`` does: a report at the interval the server advises and an orders long poll held
open. Measured per store and size, once every node has registered and one heartbeat interval
has passed: the server's CPU (its process and the scheduler's, user + system) over the window,
minus the same server's CPU before any node joined, divided by the nodes; the errors the nodes
saw; the p50/p99 of API reads (a job list and one node's tasks) made every 0.25 s during the
window; how many nodes the server held READY at the end; and how long the nodes
took to register (a server that cannot keep up never has them all READY: it is measured as it
is after 5 minutes, and the table says so).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api_server import Server  # noqa: E402
from bench.launch import machine, percentile, replace_region  # noqa: E402
from tests.postgresql import start_cluster, unusable  # noqa: E402

from shoal.server.settings import ServerSettings  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "nodes.json"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- nodes:begin -->", "<!-- nodes:end -->"
NODES_PER_LOAD = 1000  # simulated nodes per load process
REGISTER_TIMEOUT_S = 300.0
TARGET_MS = 0.1  # issue #28: server CPU per node per second at rest


def _ready(server: Server) -> int:
    status, nodes = server.get("/api/v1/nodes")
    assert status == 200, status
    return sum(1 for n in nodes if n["state"] == "READY")


def _reads(server: Server, until: float, out: list[float]) -> None:
    paths = ("/api/v1/jobs?limit=50", "/api/v1/nodes/sim-00000/tasks")
    turn = 0
    while time.monotonic() < until:
        began = time.perf_counter()
        status, _ = server.get(paths[turn % 2])
        if status == 200:
            out.append((time.perf_counter() - began) * 1000)
        turn += 1
        time.sleep(0.25)


def _loads(
    server: Server, nodes: int, seconds: float, scratch: Path, fixed: float | None
) -> list[Any]:
    loads = []
    for part in range(math.ceil(nodes / NODES_PER_LOAD)):
        count = min(NODES_PER_LOAD, nodes - part * NODES_PER_LOAD)
        out = scratch / f"load-{part}.json"
        command = [sys.executable, str(ROOT / "bench" / "node_load.py"), str(server.port)]
        command += [server.agent_token, str(count), str(seconds), str(out)]
        command += ["--start", str(part * NODES_PER_LOAD)]
        command += [] if fixed is None else ["--heartbeat", str(fixed)]
        loads.append((subprocess.Popen(command), out))
    return loads


def _end(loads: list[Any]) -> None:
    """End the load processes by PID, also when the run is cut short: all asked first, then
    each waited for, and killed if it does not end."""
    for process, _ in loads:
        process.terminate()
    for process, _ in loads:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure(
    store_name: str,
    store: str | None,
    nodes: int,
    args: argparse.Namespace,
    fixed: float | None = None,
) -> dict[str, Any]:
    """One server with ``nodes`` simulated nodes; ``fixed``: they report this often, as agents
    before the server advised an interval did (2 s), whatever it advises."""
    scratch = Path(tempfile.mkdtemp(prefix=f"nodes-{store_name}-{nodes}-"))
    server = Server(scratch / "home", scheduler="process", store=store,
                    node_timeout=args.node_timeout)  # fmt: skip
    loads: list[Any] = []
    try:
        time.sleep(3)
        idle_began, idle_cpu = time.monotonic(), server.cpu_s() + server.scheduler_cpu_s()
        time.sleep(10)
        idle = (server.cpu_s() + server.scheduler_cpu_s() - idle_cpu) / (
            time.monotonic() - idle_began
        )
        loads = _loads(server, nodes, REGISTER_TIMEOUT_S + args.seconds + 60, scratch, fixed)
        began = time.monotonic()
        while _ready(server) < nodes and time.monotonic() - began < REGISTER_TIMEOUT_S:
            time.sleep(2)
        # not all READY in time: the server cannot keep up (measured as it is, and said)
        registered_s = time.monotonic() - began if _ready(server) >= nodes else None
        advised = ServerSettings(home=scratch, node_timeout_s=args.node_timeout).heartbeat_s
        heartbeat = fixed or advised
        time.sleep(heartbeat + 2)
        reads: list[float] = []
        reader = threading.Thread(
            target=_reads, args=(server, time.monotonic() + args.seconds, reads)
        )
        window_began = time.monotonic()
        cpu_before = server.cpu_s() + server.scheduler_cpu_s()
        reader.start()
        reader.join()
        cpu = (server.cpu_s() + server.scheduler_cpu_s() - cpu_before) / (
            time.monotonic() - window_began
        )
        ready = _ready(server)
    finally:
        _end(loads)
        server.stop()
    tallies = [json.loads(out.read_text()) if out.exists() else {} for _, out in loads]
    per_node = (cpu - idle) * 1000 / nodes
    return {
        "store": store_name,
        "nodes": nodes,
        "heartbeat_s": round(heartbeat, 2),
        "advised": fixed is None,
        "registered_s": None if registered_s is None else round(registered_s, 1),
        "idle_cpu_ms_per_s": round(idle * 1000, 1),
        "cpu_ms_per_s": round(cpu * 1000, 1),
        "per_node_ms_per_s": round(per_node, 3),
        "ready_at_end": ready,
        "errors": sum(sum(t.get("errors", {}).values()) for t in tallies),
        "read_p50_ms": round(percentile(reads, 0.5), 1) if reads else None,
        "read_p99_ms": round(percentile(reads, 0.99), 1) if reads else None,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| store | nodes | heartbeat | registered in | server CPU (idle before) | per node "
        f"(target ≤ {TARGET_MS} ms/s) | READY at end | errors | read p50 / p99 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "met" if r["per_node_ms_per_s"] <= TARGET_MS else "missed"
        if r["registered_s"] is None:
            met = "saturated: over the nodes simulated, not those served"
        lines.append(
            f"| {r['store']} | {r['nodes']:,} | {r['heartbeat_s']:g} s"
            f"{'' if r['advised'] else ' (fixed, as older agents)'} | "
            + (
                f"{r['registered_s']:g} s"
                if r["registered_s"] is not None
                else f"not all in {REGISTER_TIMEOUT_S:g} s"
            )
            + f" | {r['cpu_ms_per_s']:g} ms/s ({r['idle_cpu_ms_per_s']:g}) | "
            f"{r['per_node_ms_per_s']:g} ms/s ({met}) | {r['ready_at_end']:,} | {r['errors']} | "
            f"{r['read_p50_ms']} / {r['read_p99_ms']} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="500,2000,5000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--node-timeout", type=float, default=30.0)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",")]
    rows: list[dict[str, Any]] = []
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    for store_name in args.stores.split(","):
        cluster = None
        if store_name == "postgresql":
            reason = unusable()
            if reason is not None:
                print(f"PostgreSQL left out: {reason}")
                continue
            cluster = start_cluster(durable=True)
        try:
            runs = [(sizes[0], 2.0)] + [(n, None) for n in sizes]  # 2 s: agents before
            for nodes, fixed in runs:
                store = cluster.new_database() if cluster is not None else None
                rows.append(measure(store_name, store, nodes, args, fixed))
                print(json.dumps(rows[-1]))
        finally:
            if cluster is not None:
                cluster.stop()
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    text = (
        f"Machine: {machine()}; load average {' '.join(load_before)} before, "
        f"{' '.join(load_after)} after (1, 5, 15 min); node timeout {args.node_timeout:g} s; "
        f"{args.seconds:g} s window.\n\n{table(rows)}"
    )
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    if not args.no_doc:
        replace_region(DOC, BEGIN, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
