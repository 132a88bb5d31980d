"""Crashes: ``kill -9`` of the server loses no acknowledged job and adopts running tasks; a lost
agent's tasks end with a clear platform-failure reason, never silently."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from shoal.local.supervisor import alive, stop_local
from tests.crash.cluster import describe, task_processes
from tests.integration.conftest import LocalCluster, start_cluster
from tests.integration.test_local_mode import native


def _restart_server(cluster: LocalCluster, node_timeout: float = 30.0) -> subprocess.Popen[bytes]:
    port = cluster.info.url.rsplit(":", 1)[1]
    with open(cluster.home / "server.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shoal",
                "server",
                "--home",
                str(cluster.home),
                "--port",
                port,
                "--kill-grace",
                "2",
                "--node-timeout",
                str(node_timeout),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_kill_9_server_loses_nothing_and_adopts_running_tasks(cluster: LocalCluster) -> None:
    running = cluster.submit(native("survivor", "w:\n  command: sleep 8; echo done\n"))
    cluster.wait_for(
        lambda: (
            cluster.client.job(running)["state"] == "RUNNING"
            and cluster.client.job(running)["tasks"][0]["state"] == "RUNNING"
        )
    )
    queued = [
        cluster.submit(native(f"queued{i}", "w:\n  resources: {gpu: 2}\n  command: echo ok\n"))
        for i in range(3)
    ]
    os.kill(cluster.info.server_pid, signal.SIGKILL)
    cluster.wait_for(lambda: not alive(cluster.info.server_pid), timeout_s=10)
    server = _restart_server(cluster)
    try:
        cluster.wait_for(cluster.client.health, timeout_s=30)
        job = cluster.wait(running, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        assert cluster.log(running, "w") == "done\n"
        kinds = [e["kind"] for e in cluster.client.events(running)]
        assert "adopted" in kinds
        for job_id in queued:  # acknowledged before the crash: all still there, all run
            assert cluster.wait(job_id, timeout_s=60)["state"] == "SUCCEEDED"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        # the fixture's `shoal down` signals the old (dead) server pid: harmless


def test_lost_agent_fails_its_tasks_with_a_platform_reason(tmp_path: Path) -> None:
    """``kill -9`` of the agent, no restart: by the time the server declares the node lost (and
    fails the job), the task's keeper has ended every process of the task: its process group,
    a child that ignores SIGTERM, and a grandchild that left the group (``setsid``)."""
    home = tmp_path / "home"
    cluster = start_cluster(home, nodes=1, node_timeout_s=8.0, kill_grace_s=1.0)
    try:
        command = "setsid sleep 300 & (trap '' TERM; sleep 200) & sleep 60"
        job_id = cluster.submit(native("orphan", f"w:\n  command: {json.dumps(command)}\n"))
        cluster.wait_for(lambda: len(task_processes(home)) == 5)  # keeper, sh, 3 sleeps
        task_pid = cluster.client.job(job_id)["tasks"][0]["pid"]
        os.killpg(cluster.info.agent_pid, signal.SIGKILL)  # the agent dies; its tasks run on
        cluster.wait_for(lambda: not alive(cluster.info.agent_pid), timeout_s=10)
        assert alive(task_pid)
        cluster.wait_for(lambda: cluster.client.job(job_id)["state"] == "FAILED", timeout_s=30)
        assert not describe(task_processes(home))  # no orphan: all gone before the node was lost
        assert not alive(task_pid)
        job = cluster.client.job(job_id)
        assert job["exitClass"] == "PLATFORM_FAILURE"
        assert "lost" in job["tasks"][0]["diagnostics"]
        nodes = cluster.client.nodes()
        assert nodes[0]["state"] == "NOT_READY"
        events = cluster.client.node_events(nodes[0]["name"])
        assert events[-1]["kind"] == "heartbeats_missed", events
    finally:
        cluster.client.close()
        stop_local(home, grace_s=5)
