"""Job views from the real CLI against a real local cluster: everyone's queue, job references,
tables at 80 columns (piped and on a terminal), watch mode, describe, and `job plan` on the
running cluster."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster
from tests.integration.test_cli_remote import shoal, shoal_env

LONG = "a-long-job-name-that-must-never-be-cut-at-eighty"
HOG = "version: 1\nname: {name}\nroles:\n  w:\n    instances: 2\n    resources: {{cpu: 4}}\n    command: sleep 300\n"  # noqa: E501


def env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    out.update(SHOAL_HOME=str(cluster.home), SHOAL_URL=cluster.info.url, **extra)
    return out


def on_a_terminal(cluster: LocalCluster, *args: str) -> str:
    """Run the CLI with its stdout on a pseudo-terminal 80 columns wide."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "shoal", *args],
        stdout=terminal,
        stderr=subprocess.PIPE,
        env=env(cluster, COLUMNS="80", LINES="40"),
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process has ended
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(timeout=60) == 0
    os.close(controller)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_everyones_queue_and_job_references(cluster: LocalCluster, tmp_path: Path) -> None:
    alice = cluster.client.create_user("alice", False, [], None)["token"]
    bob = cluster.client.create_user("bob", False, [], None)["token"]
    job = tmp_path / "job.yaml"
    job.write_text(HOG.format(name=LONG))
    as_alice = shoal_env(cluster.home, {"SHOAL_URL": cluster.info.url, "SHOAL_TOKEN": alice},
                         "job", "submit", str(job))  # fmt: skip
    assert as_alice.returncode == 0, as_alice.stderr
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    cluster.wait_for(lambda: cluster.client.job(f"alice~{LONG}")["state"] == "RUNNING")
    # the admin reaches alice's job by its bare name, as the list shows it
    status = shoal(cluster.home, "job", "status", LONG, "-o", "json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["user"] == "alice"
    assert shoal(cluster.home, "job", "events", LONG).returncode == 0
    # bob sees the queue he waits in, not alice's details
    as_bob = {"SHOAL_URL": cluster.info.url, "SHOAL_TOKEN": bob}
    queue = shoal_env(cluster.home, as_bob, "job", "list", "-A")
    assert queue.returncode == 0, queue.stderr
    assert LONG in queue.stdout and "alice" in queue.stdout and "…" not in queue.stdout
    header = queue.stdout.splitlines()[0].split()
    assert header == ["ID", "NAME", "USER", "VC", "STATE", "TASKS", "GPUS", "SUBMITTED", "NOTE"]
    hidden = shoal_env(cluster.home, as_bob, "job", "status", f"alice~{LONG}")
    alices = cluster.client.job(f"alice~{LONG}")["id"]
    assert hidden.returncode == 1 and hidden.stderr.strip() == (
        f"error: job {alices} (alice~{LONG}) belongs to alice, not to you (bob): only its owner "
        "and admins can see its details, logs and events or stop it (403 ForbiddenUserError)"
    )
    # waiting behind alice: `why` and `status` name her job with its owner
    waiting = tmp_path / "wait.yaml"
    waiting.write_text(HOG.format(name="bobs"))
    assert shoal_env(cluster.home, as_bob, "job", "submit", str(waiting)).returncode == 0
    cluster.wait_for(lambda: cluster.client.job("bob~bobs").get("pending") is not None)
    why = shoal_env(cluster.home, as_bob, "job", "why", "bobs")
    job_id = cluster.client.job(f"alice~{LONG}")["id"]
    assert f"{job_id} (alice/{LONG}, 0 GPUs)" in why.stdout, why.stdout + why.stderr
    # on an 80-column terminal: columns of less value go, values stay whole
    shown = on_a_terminal(cluster, "job", "list")
    lines = [line for line in shown.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), lines
    assert LONG in shown and "bobs" in shown and "…" not in shown


def test_watch_describe_wide_and_since(cluster: LocalCluster, tmp_path: Path) -> None:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    job = tmp_path / "job.yaml"
    job.write_text("version: 1\nname: quick\nroles:\n  a:\n    command: sleep 1\n")
    submitted = json.loads(shoal(cluster.home, "job", "submit", str(job), "-o", "json").stdout)
    watched = shoal(cluster.home, "job", "status", submitted["id"], "-w", "--interval", "0.2")
    assert watched.returncode == 0, watched.stderr  # it ended by itself
    snapshots = watched.stdout.split("--- ")[1:]
    assert snapshots and "SUCCEEDED" in snapshots[-1]
    assert all("SUCCEEDED" not in s for s in snapshots[:-1])
    described = shoal(cluster.home, "job", "describe", "quick")
    for part in ("Job:", "admin~quick", "State:", "SUCCEEDED", "Tasks:", "a/0", "Events:"):
        assert part in described.stdout, described.stdout
    events = described.stdout.split("Events:")[1]
    assert events.index("queued") < events.index("started") < events.index("succeeded")
    data = yaml.safe_load(shoal(cluster.home, "job", "describe", "quick", "-o", "yaml").stdout)
    assert data["job"]["name"] == "quick" and data["events"][0]["kind"] == "queued"
    wide = shoal(cluster.home, "job", "list", "--all", "--since", "1h", "-o", "wide")
    header = wide.stdout.splitlines()[0].split()
    assert header[-8:] == ["ATTEMPT", "SUBMITTED", "ELAPSED", "GPU-H", "PEAK-MEM", "CPU-TIME",
                           "NODES", "NOTE"]  # fmt: skip
    assert "quick" in wide.stdout and "node-" in wide.stdout
    future = shoal(cluster.home, "job", "list", "--all", "--since", "2999-01-01", "-o", "json")
    assert json.loads(future.stdout) == []
    bad = shoal(cluster.home, "job", "list", "--state", "TIMEOUT")
    assert bad.returncode == 2 and "use one of WAITING, RUNNING" in bad.stderr
    team = "a-long-virtual-cluster-name-that-rich-would-cut"
    cluster.client.save_vc(team, {"members": ["alice", "bob", "carol", "dave"]}, create=True)
    vcs = shoal_env(cluster.home, {"COLUMNS": "80"}, "vc", "list")  # piped: other tables too
    assert team in vcs.stdout and "alice,bob,carol,dave" in vcs.stdout and "…" not in vcs.stdout


def test_list_watch_redraws_and_ctrl_c_exits_0(cluster: LocalCluster, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "shoal", "job", "list", "-w", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(cluster),
    )
    try:
        assert _read_until(process, "no jobs")
        cluster.submit("version: 1\nname: seen\nroles:\n  a:\n    command: sleep 300\n")
        assert _read_until(process, "seen")  # a new snapshot appended
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0
    assert b"Traceback" not in stderr and b"Aborted" not in stderr


def _read_until(process: subprocess.Popen[bytes], text: str, timeout_s: float = 30) -> bool:
    """Read the process's stdout (unbuffered) until ``text`` appears in what it printed since
    the last call."""
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            seen += os.read(process.stdout.fileno(), 65536)
            if text.encode() in seen:
                return True
    return False


def test_plan_uses_the_running_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    job = tmp_path / "job.yaml"
    job.write_text("version: 1\nname: p\nroles:\n  w:\n    resources: {cpu: 3}\n    command: x\n")
    idle = shoal(cluster.home, "job", "plan", str(job), "-o", "json")
    assert idle.returncode == 0, idle.stderr
    assert f"planned on the server at {cluster.info.url}: its 2 node(s)" in idle.stderr
    (plan,) = json.loads(idle.stdout)
    assert plan["cluster"] == "server" and plan["placements"][0]["node"].startswith("node-")
    hog = cluster.submit(HOG.format(name="hog"))
    cluster.wait_for(lambda: cluster.client.job(hog)["state"] == "RUNNING")
    busy = shoal(cluster.home, "job", "plan", str(job))
    assert busy.returncode == 1
    assert "p would not start now: InsufficientCPU" in busy.stderr, busy.stderr
    simulated = shoal(cluster.home, "job", "plan", str(job), "--simulate", "-o", "json")
    assert simulated.returncode == 0 and json.loads(simulated.stdout)[0]["cluster"] == "simulated"
    assert [j["name"] for j in cluster.client.jobs()] == ["hog"]  # the plans stored nothing
