"""Killing and restarting a local cluster's server and agent as an operator (or systemd) would:
``kill -9``, then the same command line again at once; how long the API took to answer again;
the processes a cluster's tasks left behind. Only processes these tests started are signalled,
by PID or process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from shoal.agent.task_users import TaskUsers
from shoal.agent.workspace import Workspace
from shoal.local.supervisor import RUN_FILE, UpOptions, _agent_args, alive
from tests.integration.conftest import LocalCluster

RECOVERY_LIMIT_S = 60.0  # the API must answer again within this (a liveness bound, not a figure)


@dataclass(frozen=True)
class Recovery:
    killed_at: float  # time.monotonic() of the SIGKILL
    health_s: float  # kill -> first 200 from /api/v1/health
    list_s: float  # kill -> first 200 from GET /api/v1/jobs
    back_wall: float  # time.time() of that first listing


def _update_run(cluster: LocalCluster, **pids: int) -> None:
    path = cluster.home / RUN_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **pids}))


def current_pid(cluster: LocalCluster, which: str) -> int:
    return int(json.loads((cluster.home / RUN_FILE).read_text())[f"{which}_pid"])


def wait_dead(pids: list[int], timeout_s: float) -> list[int]:
    """Those of ``pids`` still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def kill_server(cluster: LocalCluster, whole_group: bool) -> tuple[float, list[int]]:
    """``kill -9`` the server (its pid alone, or its whole process group with the scheduler
    process); returns when, and the scheduler process(es) it had."""
    pid = current_pid(cluster, "server")
    try:
        children = [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        children = []
    killed_at = time.monotonic()
    if whole_group:
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)
    assert not wait_dead([pid], 10), f"the server {pid} outlived SIGKILL"
    return killed_at, children


def start_server(cluster: LocalCluster, node_timeout_s: float = 30.0) -> int:
    """The server's command line as ``shoal up`` runs it, on the same port; ``shoal down``
    (run.json) stops this one."""
    port = cluster.info.url.rsplit(":", 1)[1]
    args = ["server", "--home", str(cluster.home), "--host", "127.0.0.1", "--port", port]
    args += ["--kill-grace", "2", "--node-timeout", f"{node_timeout_s:g}"]
    with open(cluster.home / "server.log", "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "shoal", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _update_run(cluster, server_pid=server.pid)
    return server.pid


def wait_recovered(cluster: LocalCluster, token: str, killed_at: float) -> Recovery:
    """Poll until /health and a job listing answer 200; how long after the kill each did."""
    deadline = killed_at + RECOVERY_LIMIT_S
    health_s: float | None = None
    with httpx.Client(base_url=cluster.info.url, timeout=1.0) as http:
        while time.monotonic() < deadline:
            try:
                if health_s is None:
                    if http.get("/api/v1/health").status_code == 200:
                        health_s = time.monotonic() - killed_at
                        continue
                else:
                    headers = {"Authorization": f"Bearer {token}"}
                    answer = http.get("/api/v1/jobs", params={"limit": 1}, headers=headers)
                    if answer.status_code == 200:
                        now = time.monotonic()
                        return Recovery(killed_at, health_s, now - killed_at, time.time())
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
    raise AssertionError(f"the API did not answer within {RECOVERY_LIMIT_S:g}s of the kill")


@dataclass(frozen=True)
class OldScheduler:
    gone_s: float | None  # kill -> its old scheduler process(es) ended (None: not within 20 s)
    left: list[int]  # those still alive then


def crash_and_restart(
    cluster: LocalCluster, token: str, whole_group: bool
) -> tuple[Recovery, OldScheduler]:
    """``kill -9`` the server, start it again at once, wait until the API answers; meanwhile
    note when the killed server's scheduler process ended."""
    killed_at, schedulers = kill_server(cluster, whole_group)
    gone: list[float] = []

    def watch() -> None:
        if not wait_dead(schedulers, 20):
            gone.append(round(time.monotonic() - killed_at, 2))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start_server(cluster)
    recovery = wait_recovered(cluster, token, killed_at)
    watcher.join(timeout=30)
    left = [p for p in schedulers if alive(p)]
    return recovery, OldScheduler(gone[0] if gone else None, left)


def kill_agent(cluster: LocalCluster, whole_group: bool) -> float:
    pid = current_pid(cluster, "agent")
    killed_at = time.monotonic()
    if whole_group:
        os.killpg(pid, signal.SIGKILL)  # its tasks run in sessions of their own
    else:
        os.kill(pid, signal.SIGKILL)
    assert not wait_dead([pid], 10), f"the agent {pid} outlived SIGKILL"
    return killed_at


def start_agent(cluster: LocalCluster, options: UpOptions) -> int:
    """``shoal agent`` as ``shoal up`` runs it, on the same home."""
    with open(cluster.home / "agent.log", "ab") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "shoal", *_agent_args(options, cluster.info.url)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _update_run(cluster, agent_pid=agent.pid)
    return agent.pid


def task_root_of(agent_home: Path) -> Path:
    """Where the agent on ``agent_home`` puts its tasks' directories."""
    return Workspace(agent_home.resolve(), TaskUsers.default()).root


def task_processes(home: Path) -> list[psutil.Process]:
    """Live processes of this cluster's tasks (keepers and what they started): those whose
    environment names a work directory of one of its agents (under ``home``, or in the task
    root of an agent whose home is under ``home``: shoal.agent.workspace)."""
    found = []
    roots = (str(home), *(str(task_root_of(lock.parent)) for lock in home.glob("**/agent.lock")))
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get("SHOAL_WORKDIR", "").startswith(roots):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def describe(processes: list[psutil.Process]) -> list[str]:
    out = []
    for process in processes:
        try:
            out.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]
