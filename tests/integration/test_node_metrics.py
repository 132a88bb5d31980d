"""Node metrics end to end (docs/metrics.md): a real server and agent, a CPU-busy task; its node's
CPU series rises above zero, the overview reserves exactly what the task asked for, and the node's
task list names it. No NVML here: the GPU series stay absent (simulated GPUs)."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.integration.conftest import LocalCluster, local_cli

BUSY = """\
version: 1
name: busy
roles:
  spin:
    resources: {cpu: 1.5, memory: 256Mi}
    command: 'python3 -c "while True: pass"'
"""


def _poll(what: Any, timeout_s: float) -> Any:
    """``what()`` once it is truthy; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not seen within {timeout_s}s")


def test_a_busy_task_shows_in_its_nodes_metrics_and_the_overview(local: LocalCluster) -> None:
    client = local.client
    job_id = local.submit(BUSY)
    try:
        local.wait_for(lambda: client.job(job_id)["state"] == "RUNNING", 60)
        (task,) = client.job(job_id)["tasks"]
        node = task["node"]

        def busy_buckets() -> list[float]:
            series = client.node_metrics(node, since=-120)["series"]["cpuUsed"]
            return [v for v in series if v is not None and v > 0.2]

        busy = _poll(busy_buckets, 60)  # the agent samples each second, reports every 2 s
        assert max(busy) < 1.6  # one thread, held to 1.5 CPUs at most

        overview = client.overview()
        assert overview["allocated"]["cpu"] == 1.5
        assert overview["allocated"]["memoryMiB"] == 256.0
        assert overview["capacity"]["cpu"] == 8.0  # two simulated nodes of 4 CPUs
        assert overview["nodes"]["byState"]["READY"] == 2
        assert overview["jobs"]["RUNNING"] == 1
        assert _poll(lambda: (client.overview()["used"]["cpu"] or 0) > 0.2, 30)
        assert overview["used"]["gpu"] is None  # simulated GPUs: no NVML figures

        (on_node,) = client.node_tasks(node)
        assert (on_node["jobId"], on_node["role"], on_node["cpu"]) == (job_id, "spin", 1.5)
        assert on_node["command"] == 'python3 -c "while True: pass"'
        assert on_node["state"] == "RUNNING" and on_node["startedAt"] is not None

        metrics = client.node_metrics(node, since=-120)
        assert metrics["gpus"] == []
        assert all(v is None for v in metrics["series"]["gpuUsed"])
        assert any(v for v in metrics["series"]["hostCpuPercent"] if v is not None)

        def reserved() -> list[float | None]:
            return list(client.cluster_metrics(since=-120)["series"]["cpuAllocated"])

        # a bucket is closed once the next starts (10 s); the one the task started in holds the
        # mean of its start (0) and its end (1.5), the next ones the whole reservation
        assert _poll(lambda: 1.5 in reserved(), 40)
        shown = local_cli(local, "node", "show", node, "--minutes", "2")
        assert shown.returncode == 0, shown.stderr
        assert "cpu used (cores)" in shown.stdout and "host cpu (%)" in shown.stdout
        assert f"{job_id} busy" in shown.stdout and "spin/0" in shown.stdout
        assert "gpu busy" not in shown.stdout  # never measured here: not shown as zero
        as_json = local_cli(local, "node", "show", node, "-o", "json")
        assert json.loads(as_json.stdout)["tasks"][0]["jobId"] == job_id
    finally:
        client.stop(job_id)
        local.wait(job_id)
