"""Cluster-mode benchmark: a server and three agents on namespace hosts (HTTPS, node
certificates), plus 50 simulated nodes that join with their own certificates and heartbeat as
agents do. Not a test: it prints a table, writes bench/results/cluster.json and rewrites the part
of docs/benchmarks.md between ``<!-- cluster:begin -->`` and ``<!-- cluster:end -->``.

    .venv/bin/python bench/cluster.py [--jobs 30] [--sim-nodes 50] [--node-timeout 8]

Measured:

- **submit → all tasks running** of a 3-task job spread over the 3 hosts (1 core each): from the
  client's submit call to the latest agent start stamp of the job's tasks (``startedAt``), jobs
  one after the other;
- **heartbeat cost per node**: the server process's CPU time (user + system, psutil) over a
  window, with the 3 agents only and then with the simulated nodes added; the difference divided
  by their number. A simulated node sends a report every 2 s and keeps an orders long-poll open
  (10 s), as ``shoal agent run`` does; they are cordoned, so nothing is placed on them;
- **failover**: ``kill -9`` of the agent running a 1-task job until the task's next attempt runs
  on another host (dominated by ``--node-timeout``, which is printed with it).

Needs root (network namespaces); the hosts are 198.18.N.0/24 as in tests/multihost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.multihost: the namespace lab and the rack

from tests.multihost.netns import NetnsLab  # noqa: E402
from tests.multihost.rack import Rack, build_rack  # noqa: E402

from launch import machine, percentile, replace_region  # noqa: E402  bench/launch.py, beside this script
from shoal.agent.identity import Connection, Identity, join  # noqa: E402
from shoal.pki import JoinToken  # noqa: E402
from shoal.protocol import AgentNode, OrdersRequest, ReportRequest  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "cluster.json"
BEGIN, END = "<!-- cluster:begin -->", "<!-- cluster:end -->"
HEARTBEAT_S = 2.0  # as shoal.agent.main
ORDER_WAIT_S = 10.0
THREE_HOSTS = """\
version: 1
name: spread-{i}
roles:
  w:
    instances: 3
    resources: {{cpu: 1, memory: 64Mi}}
    command: 'true'
"""
ONE_TASK = """\
version: 1
name: failover
retries: 3
roles:
  w:
    resources: {cpu: 1, memory: 64Mi}
    command: sleep 600
"""


def submit(rack: Rack, text: str) -> str:
    return str(rack.admin.submit(text)[0]["id"])


def spread_latencies(rack: Rack, jobs: int) -> list[float]:
    """Seconds from submit to the last task's start, for ``jobs`` 3-host jobs in turn."""
    found = []
    for i in range(jobs):
        began = time.time()
        job_id = submit(rack, THREE_HOSTS.format(i=i))
        job = rack.admin.wait(job_id, timeout_s=60, poll_s=0.05)
        tasks = rack.admin.job(job_id)["tasks"]
        assert job["state"] == "SUCCEEDED", job
        assert {t["node"] for t in tasks} == {"n1", "n2", "n3"}, tasks
        found.append(max(float(t["startedAt"]) for t in tasks) - began)
    return found


class SimulatedNode:
    """One joined node whose 'agent' is two threads: reports every 2 s and an orders long-poll."""

    def __init__(self, rack: Rack, home: Path, name: str, token: str, address: str) -> None:
        identity = Identity(home=str(home), server=rack.url, node=name, address=address)
        join(identity, JoinToken.parse(token))
        self.name = name
        self.address = address
        settings = Connection.mutual_tls(Identity.load(home)).httpx_settings(ORDER_WAIT_S + 10)
        self.client = httpx.Client(**settings)
        self.stop = threading.Event()
        self.reports = 0
        self.threads = [
            threading.Thread(target=self._report, daemon=True),
            threading.Thread(target=self._orders, daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _node(self) -> AgentNode:
        return AgentNode(
            name=self.name,
            address=self.address,
            cpu_millis=8000,
            memory_mib=32768,
            gpu_indices=list(range(8)),
            port_low=20000,
            port_high=21000,
        )

    def _report(self) -> None:
        while not self.stop.is_set():
            body = ReportRequest(agent_id=self.name, nodes=[self._node()], agent_version="bench")
            try:
                self.client.post("/api/v1/agent/report", json=body.model_dump()).raise_for_status()
                self.reports += 1
            except httpx.HTTPError:
                pass
            self.stop.wait(HEARTBEAT_S)

    def _orders(self) -> None:
        while not self.stop.is_set():
            body = OrdersRequest(agent_id=self.name, nodes=[self.name], wait_s=ORDER_WAIT_S)
            try:
                self.client.post("/api/v1/agent/orders", json=body.model_dump())
            except httpx.HTTPError:
                self.stop.wait(0.5)

    def close(self) -> None:
        self.stop.set()
        self.client.close()


def server_cpu_ms_per_s(rack: Rack, window_s: float) -> float:
    assert rack.server is not None
    main = psutil.Process(rack.server.pid)
    processes = [main, *main.children(recursive=True)]

    def cpu() -> float:
        return sum(p.cpu_times().user + p.cpu_times().system for p in processes)

    before, began = cpu(), time.monotonic()
    time.sleep(window_s)
    return (cpu() - before) * 1000 / (time.monotonic() - began)


def heartbeat_cost(rack: Rack, sims: int, window_s: float) -> dict[str, float]:
    quiet = server_cpu_ms_per_s(rack, window_s)
    line = rack.join_line("--ttl", "10m", "--uses", str(sims))
    token = line[line.index("--token") + 1]
    nodes = []
    for i in range(sims):
        name = f"sim-{i:03d}"
        nodes.append(SimulatedNode(rack, rack.root / name, name, token, f"198.19.0.{i + 1}"))
    for node in nodes:
        node.start()
    rack.wait_for(lambda: len(rack.nodes()) == 3 + sims, 60, "simulated nodes registered")
    for node in nodes:
        rack.admin.node_action(node.name, "cordon")
    time.sleep(HEARTBEAT_S * 2)
    loaded = server_cpu_ms_per_s(rack, window_s)
    reports = sum(n.reports for n in nodes)
    for node in nodes:
        node.close()
    return {
        "server_cpu_ms_per_s_3_agents": quiet,
        "server_cpu_ms_per_s_with_sims": loaded,
        "per_node_cpu_ms_per_s": (loaded - quiet) / sims,
        "reports_sent": reports,
    }


def failover_seconds(rack: Rack) -> float:
    job_id = submit(rack, ONE_TASK)

    def running_on() -> str | None:
        tasks = rack.admin.job(job_id)["tasks"]  # none until it is placed
        running = [t for t in tasks if t["state"] == "RUNNING"]
        return str(running[0]["node"]) if running else None

    rack.wait_for(lambda: running_on() is not None, 30, "the task running")
    first = running_on()
    assert first is not None
    killed_at = time.time()
    rack.kill(rack.agents[first])
    rack.wait_for(lambda: running_on() not in (None, first), 120, "the task elsewhere")
    started = max(float(t["startedAt"] or 0) for t in rack.admin.job(job_id)["tasks"])
    rack.admin.stop(job_id)
    return started - killed_at


def table(data: dict[str, Any]) -> str:
    lat = data["spread_ms"]
    beat = data["heartbeat"]
    rows = [
        (
            "submit → all 3 tasks running, 3-host job",
            f"p50 {lat['p50']:.0f} ms, p99 {lat['p99']:.0f} ms ({data['jobs']} jobs in turn)",
        ),
        ("server CPU, 3 agents", f"{beat['server_cpu_ms_per_s_3_agents']:.1f} ms/s"),
        (
            f"server CPU, 3 agents + {data['sim_nodes']} simulated nodes",
            f"{beat['server_cpu_ms_per_s_with_sims']:.1f} ms/s",
        ),
        (
            "heartbeat cost per node (report every 2 s + orders long-poll)",
            f"{beat['per_node_cpu_ms_per_s']:.2f} ms/s",
        ),
        (
            f"kill -9 of an agent → its task running elsewhere (node timeout "
            f"{data['node_timeout_s']:g} s)",
            f"{data['failover_s']:.1f} s",
        ),
    ]
    lines = [
        f"Machine: {data['machine']}; load average {data['load_before']} before, "
        f"{data['load_after']} after (1, 5, 15 min). Commit `{data['commit']}`.",
        "",
        "| measure | result |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows],
    ]
    return "\n".join(lines)


def commit() -> str:
    head = (ROOT / ".git" / "HEAD").read_text().strip()
    if head.startswith("ref: "):
        ref = ROOT / ".git" / head[5:]
        return ref.read_text().strip()[:10] if ref.exists() else head[5:]
    return head[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--sim-nodes", type=int, default=50)
    parser.add_argument("--node-timeout", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=20.0, help="CPU sampling window (s)")
    args = parser.parse_args()
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lab = NetnsLab.create(4, tag=f"bc{os.getpid() % 10000}")
    rack = None
    try:
        with tempfile.TemporaryDirectory(prefix="shoal-bench-cluster-") as tmp:
            rack = build_rack(lab, Path(tmp), nodes=3, node_timeout_s=args.node_timeout)
            spread = [x * 1000 for x in spread_latencies(rack, args.jobs)]
            beat = heartbeat_cost(rack, args.sim_nodes, args.window)
            failover = failover_seconds(rack)
            rack.close()
            rack = None
    finally:
        if rack is not None:
            rack.close()
        lab.destroy()
    data = {
        "machine": machine(),
        "commit": commit(),
        "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "jobs": args.jobs,
        "sim_nodes": args.sim_nodes,
        "node_timeout_s": args.node_timeout,
        "spread_ms": {
            "p50": percentile(spread, 0.5),
            "p99": percentile(spread, 0.99),
            "all": spread,
        },
        "heartbeat": beat,
        "failover_s": failover,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    shown = Table(title="cluster mode (3 namespace hosts)")
    shown.add_column("measure")
    shown.add_column("result")
    region = table(data)
    for line in region.splitlines()[4:]:
        name, value = line.strip("|").split(" | ")
        shown.add_row(name.strip(), value.strip())
    Console().print(shown)
    replace_region(DOC, BEGIN, END, region)


if __name__ == "__main__":
    main()
