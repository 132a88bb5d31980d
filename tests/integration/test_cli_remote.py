"""The CLI against a running local cluster, as a user types it (real `shoal` processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, port_base

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def shoal(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env["SHOAL_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_submit_wait_status_list_logs_json(cluster: LocalCluster, tmp_path: Path) -> None:
    # `shoal up` wrote server.json? The fixture started it the same way: the CLI finds it.
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "version: 1\nname: cli-job\nroles:\n  a:\n    instances: 2\n"
        '    command: echo "task $SHOAL_TASK_INDEX"\n'
    )
    submitted = shoal(cluster.home, "job", "submit", str(job_file), "--wait", "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    result = json.loads(submitted.stdout)
    assert result["state"] == "SUCCEEDED" and result["id"]
    status = shoal(cluster.home, "job", "status", result["id"], "--output", "json")
    detail = json.loads(status.stdout)
    assert detail["state"] == "SUCCEEDED"
    assert [(t["role"], t["index"], t["state"], t["exitCode"]) for t in detail["tasks"]] == [
        ("a", 0, "SUCCEEDED", 0),
        ("a", 1, "SUCCEEDED", 0),
    ]
    assert all(t["node"].startswith("node-") for t in detail["tasks"])
    logs = shoal(cluster.home, "job", "logs", "cli-job", "--task", "a/1")
    assert logs.stdout == "task 1\n"
    listed = json.loads(shoal(cluster.home, "job", "list", "--all", "-o", "json").stdout)
    assert [j["name"] for j in listed] == ["cli-job"]
    assert json.loads(shoal(cluster.home, "job", "list", "-o", "json").stdout) == []
    cluster_json = json.loads(shoal(cluster.home, "status", "-o", "json").stdout)
    assert cluster_json["url"] == cluster.info.url
    assert cluster_json["totals"]["nodes"] == 2 and len(cluster_json["nodes"]) == 2
    nodes = json.loads(shoal(cluster.home, "node", "list", "-o", "json").stdout)
    assert {n["name"] for n in nodes} == {"node-0", "node-1"}


def test_failures_are_one_clear_line(cluster: LocalCluster, tmp_path: Path) -> None:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    unknown = shoal(cluster.home, "job", "status", "no-such-job")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "error: no job 'no-such-job'"
    failing = tmp_path / "fail.yaml"
    failing.write_text("version: 1\nname: f\nroles:\n  a:\n    command: exit 4\n")
    result = shoal(cluster.home, "job", "submit", str(failing), "--wait")
    assert result.returncode == 1
    assert "FAILED" in result.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: b\nroles:\n  a:\n    resources: {gpu: -2}\n    command: x\n")
    rejected = shoal(cluster.home, "job", "submit", str(bad))
    assert rejected.returncode == 1
    assert "roles.a.resources.gpu (line 5): must be an integer >= 0, got -2" in rejected.stderr
    assert "Traceback" not in rejected.stderr + unknown.stderr


def test_no_server_says_how_to_start_one(tmp_path: Path) -> None:
    home = tmp_path / "empty"
    home.mkdir()
    (home / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9"}))
    result = shoal(home, "status")
    assert result.returncode == 1
    assert "start one with `shoal up`" in result.stderr
    assert "Traceback" not in result.stderr


def test_up_and_down_leave_nothing_behind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = shoal(
        home,
        "up",
        "--port",
        "0",
        "--nodes",
        "1",
        "--cpus",
        "2",
        "--memory",
        "2Gi",
        "--port-base",
        str(port_base() + 3000),
    )
    assert up.returncode == 0, up.stderr
    run = json.loads((home / "run.json").read_text())
    assert (home / "admin.token").stat().st_mode & 0o777 == 0o600
    job_file = tmp_path / "sleepy.yaml"
    job_file.write_text("version: 1\nname: s\nroles:\n  a:\n    command: sleep 300\n")
    submitted = json.loads(shoal(home, "job", "submit", str(job_file), "-o", "json").stdout)
    pid = None
    for _ in range(100):
        tasks = json.loads(shoal(home, "job", "status", submitted["id"], "-o", "json").stdout)[
            "tasks"
        ]
        if tasks and tasks[0]["pid"]:
            pid = tasks[0]["pid"]
            break
        time.sleep(0.1)
    assert pid is not None and psutil.pid_exists(pid)
    down = shoal(home, "down")
    assert down.returncode == 0 and "is down" in down.stdout
    for gone in (run["server_pid"], run["agent_pid"], pid):
        assert not psutil.pid_exists(gone) or psutil.Process(gone).status() == "zombie"


def test_vcs_users_and_tokens_from_the_cli(cluster: LocalCluster, tmp_path: Path) -> None:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    made = shoal(
        cluster.home,
        "vc",
        "create",
        "team-a",
        "--guarantee",
        "gpu=2,cpu=2,memory=2Gi",
        "--borrow-limit",
        "gpu=1",
        "--members",
        "alice",
        "--user-gpu-cap",
        "1",
    )
    assert made.returncode == 0, made.stderr
    too_big = shoal(cluster.home, "vc", "create", "team-b", "--guarantee", "gpu=3")
    assert too_big.returncode == 1 and "more than the cluster" in too_big.stderr
    vcs = {v["name"]: v for v in json.loads(shoal(cluster.home, "vc", "list", "-o", "json").stdout)}
    assert vcs["team-a"]["guarantee"] == {"cpu": 2.0, "memoryMiB": 2048.0, "gpu": 2.0}
    assert vcs["default"]["guarantee"]["gpu"] == 2.0  # what team-a leaves
    user = json.loads(shoal(cluster.home, "user", "create", "alice", "-o", "json").stdout)
    assert user["name"] == "alice" and user["token"].startswith("shoal_")
    job_file = tmp_path / "job.yaml"
    job_file.write_text("version: 1\nname: mine\nvc: team-a\nroles:\n  a:\n    command: 'true'\n")
    env_alice = {"SHOAL_TOKEN": user["token"]}
    submitted = shoal_env(
        cluster.home, env_alice, "job", "submit", str(job_file), "--wait", "-o", "json"
    )
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["state"] == "SUCCEEDED"
    theirs = json.loads(
        shoal_env(cluster.home, env_alice, "job", "list", "--all", "-o", "json").stdout
    )
    assert [j["user"] for j in theirs] == ["alice"]
    updated = shoal(cluster.home, "vc", "update", "team-a", "--guarantee", "gpu=1")
    assert updated.returncode == 0
    listed = json.loads(shoal(cluster.home, "vc", "list", "-o", "json").stdout)
    assert {v["name"]: v["guarantee"]["gpu"] for v in listed} == {"default": 3.0, "team-a": 1.0}
    tokens = shoal_env(cluster.home, env_alice, "token", "list", "-o", "json")
    assert user["token"] not in tokens.stdout
    deleted = shoal(cluster.home, "vc", "delete", "team-a")
    assert deleted.returncode == 0


def shoal_env(home: Path, extra: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(home), **extra)
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
