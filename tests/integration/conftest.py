"""A real local cluster per test module: server and agent processes on a free loopback port, with
a temporary ``SHOAL_HOME``; torn down by PID (their own process groups) afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shoal.agent.task_users import TaskUsers
from shoal.agent.workspace import Workspace
from shoal.client import ShoalClient, ShoalError
from shoal.local.supervisor import RunInfo, UpOptions, alive, start_local, stop_local
from tests.envs import is_user_setting


@dataclass
class LocalCluster:
    home: Path
    info: RunInfo
    client: ShoalClient

    def submit(self, text: str, **kwargs: object) -> str:
        return str(self.client.submit(text, **kwargs)[0]["id"])  # type: ignore[arg-type]

    def wait(self, job_id: str, timeout_s: float = 60.0) -> dict[str, object]:
        return self.client.wait(job_id, timeout_s=timeout_s, poll_s=0.05)

    def wait_for(self, what: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if what():
                return
            time.sleep(0.05)
        raise AssertionError(f"condition not met within {timeout_s}s")

    def output_so_far(self, job_id: str, role: str, index: int = 0) -> str:
        try:
            return str(self.client.logs(job_id, role, index)["data"])
        except ShoalError:
            return ""  # not placed yet

    def log(self, job_id: str, role: str, index: int = 0, stream: str = "stdout") -> str:
        return "".join(self.client.follow_logs(job_id, role, index, stream, timeout_s=30))


def node_data_cache(agent_home: Path) -> Path:
    """Where the agent on ``agent_home`` caches data sets (shoal.agent.workspace): its task
    root when tasks run as their users, else its home."""
    return Workspace(agent_home.resolve(), TaskUsers.default()).data


def port_base() -> int:
    """Task ports per pytest-xdist worker, so clusters of parallel tests never share ports.
    ``$SHOAL_TEST_PORT_BASE`` moves the whole block (two test runs side by side)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = int(os.environ.get("SHOAL_TEST_PORT_BASE", "22000"))
    return base + int(worker or 0) % 8 * 4000


def start_cluster(home: Path, **options: object) -> LocalCluster:
    settings = {
        "port": 0,
        "nodes": 2,
        "cpus": 4.0,
        "memory_mib": 8192,
        "gpus": 2,
        "kill_grace_s": 2.0,
        "port_base": port_base(),
        **options,
    }
    info = start_local(UpOptions(home=home, **settings), timeout_s=60)  # type: ignore[arg-type]
    token = (home / "admin.token").read_text().strip()
    return LocalCluster(home, info, ShoalClient(info.url, token))


@contextlib.contextmanager
def running_cluster(home: Path, **options: object) -> Iterator[LocalCluster]:
    """A local cluster at ``home`` that `shoal --context local` finds, stopped when done."""
    running = start_cluster(home, **options)
    (home / "server.json").write_text(json.dumps({"url": running.info.url}))
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    home = tmp_path / "shoal-home"
    running = start_cluster(home)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)
        for pid in (running.info.server_pid, running.info.agent_pid):
            assert not alive(pid), f"process {pid} outlived `shoal down`"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)


def local_cli(
    cluster: LocalCluster, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``shoal --context local ARGS`` as a user of this cluster's machine would run it."""
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(cluster.home), SHOAL_CONFIG=str(cluster.home / "no-config.yaml"))
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "shoal", "--context", "local", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture
def local(cluster: LocalCluster) -> LocalCluster:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    return cluster
