"""Node life cycle against a real local cluster (2 simulated nodes, 4 CPUs each): a cordoned
node gets no new tasks while the other does, a drained node's running job finishes and nothing
new lands on it, uncordon makes a node usable again, every change is a node event, and
`shoal node list` fits an 80-column terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster
from tests.integration.test_cli_views import on_a_terminal
from tests.integration.test_local_mode import native


def shoal(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(cluster.home), SHOAL_URL=cluster.info.url, COLUMNS="80")
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def gated(cluster: LocalCluster, name: str, cpu: int, gate: Path) -> str:
    """A job that runs until ``gate`` exists."""
    command = f"'while [ ! -e {gate} ]; do sleep 0.05; done'"
    roles = f"w:\n  resources: {{cpu: {cpu}, memory: 256}}\n  command: {command}\n"
    return cluster.submit(native(name, roles))


def running_on(cluster: LocalCluster, job_id: str) -> str:
    cluster.wait_for(lambda: cluster.client.job(job_id)["state"] == "RUNNING")
    return str(cluster.client.job(job_id)["tasks"][0]["node"])


def waits_after_a_cycle(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    """The job once the scheduler has looked at it and left it waiting."""
    cluster.wait_for(lambda: cluster.client.job(job_id).get("pending") is not None)
    job = cluster.client.job(job_id)
    assert job["state"] == "WAITING", job
    return job


def nodes(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in cluster.client.nodes()}


def test_cordon_drain_uncordon(cluster: LocalCluster, tmp_path: Path) -> None:
    gate_a, gate_hog = tmp_path / "a", tmp_path / "hog"
    cordoned = shoal(cluster, "node", "cordon", "node-1")
    assert cordoned.returncode == 0, cordoned.stderr
    assert "node node-1 cordoned; it is CORDONED" in cordoned.stdout
    job_a = gated(cluster, "a", 1, gate_a)
    assert running_on(cluster, job_a) == "node-0"
    hog = gated(cluster, "hog", 4, gate_hog)  # fits only on the cordoned node-1
    waits_after_a_cycle(cluster, hog)

    assert shoal(cluster, "node", "uncordon", "node-1").returncode == 0
    assert running_on(cluster, hog) == "node-1"  # usable again

    drained = shoal(cluster, "node", "drain", "node-0")
    assert drained.returncode == 0, drained.stderr
    assert "it is DRAINING (1 task(s))" in drained.stdout
    job_b = gated(cluster, "b", 1, tmp_path / "b")  # node-0 has room, but it is draining
    waits_after_a_cycle(cluster, job_b)
    assert cluster.client.job(job_a)["state"] == "RUNNING"  # untouched by the drain

    gate_a.touch()
    assert cluster.wait(job_a)["state"] == "SUCCEEDED"  # the running job finished
    cluster.wait_for(lambda: nodes(cluster)["node-0"]["state"] == "DRAINED")
    job_c = gated(cluster, "c", 1, tmp_path / "c")  # submitted after the drain emptied node-0
    waits_after_a_cycle(cluster, job_c)
    assert cluster.client.job(job_b)["state"] == "WAITING"
    listing = re.sub(r"\x1b\[[0-9;]*m", "", on_a_terminal(cluster, "node", "list"))
    assert all(len(line) <= 80 for line in listing.splitlines()), listing
    assert "DRAINED" in listing and "node-1" in listing and "READY" in listing

    again = shoal(cluster, "node", "drain", "node-0")
    assert again.returncode == 1 and "node 'node-0' is already draining" in again.stderr
    assert shoal(cluster, "node", "uncordon", "node-0").returncode == 0
    assert running_on(cluster, job_b) == "node-0"
    assert running_on(cluster, job_c) == "node-0"
    for gate in (gate_hog, tmp_path / "b", tmp_path / "c"):
        gate.touch()
    for job_id in (hog, job_b, job_c):
        assert cluster.wait(job_id)["state"] == "SUCCEEDED"

    events = {
        name: [e["kind"] for e in cluster.client.node_events(name)] for name in nodes(cluster)
    }
    assert events == {
        "node-0": ["registered", "drain", "drained", "uncordon"],
        "node-1": ["registered", "cordon", "uncordon"],
    }
    shown = shoal(cluster, "node", "events", "node-0")
    assert shown.returncode == 0 and "drained by admin" in shown.stdout
    unknown = shoal(cluster, "node", "cordon", "node-9")
    assert unknown.returncode == 1 and "node 'node-9' does not exist" in unknown.stderr
