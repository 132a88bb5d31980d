"""End to end, with the commands docs/cluster.md shows: `shoal cluster create` starts the server
on this machine (root namespace, on the lab's address), installs shoal over SSH on a namespace
host running sshd (no route out: the wheels come from here), joins it and starts its agent; a job
runs there; `shoal cluster status` shows it; create again skips it; `shoal cluster delete`
leaves no agent, task or server process behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.bootstrap import hostctl
from shoal.bootstrap.wheels import default_wheelhouse
from tests.bootstrap.sshd import SshdHost, sshd_missing, start_sshd
from tests.envs import is_user_setting
from tests.multihost.netns import NetnsLab, namespaces_usable

pytestmark = [
    pytest.mark.skipif(
        namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
    ),
    pytest.mark.skipif(sshd_missing() is not None, reason=str(sshd_missing())),
    pytest.mark.skipif(
        not default_wheelhouse().is_dir(),
        reason=f"no wheelhouse at {default_wheelhouse()}: run `make wheelhouse`",
    ),
    pytest.mark.slow,
]

PORT_BASE = int(os.environ.get("SHOAL_TEST_PORT_BASE", "20000"))
JOB = """\
version: 1
name: where-am-i
roles:
  main:
    instances: 1
    resources: {cpu: 0.5, memory: 128Mi, gpu: 0}
    command: ip -4 -o addr show eth0 && echo "ran on $SHOAL_TASK_ROLE"
"""


@pytest.fixture
def lab_sshd(tmp_path: Path) -> Iterator[tuple[NetnsLab, SshdHost]]:
    lab = NetnsLab.create(1, tag=f"sse{os.getpid() % 10000}")
    try:
        yield lab, start_sshd(lab, lab.host(1), tmp_path / "sshd")
    finally:
        lab.destroy()


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def shoal(
    env: dict[str, str], *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.long  # `make test-long` (the default run has this feature's other tests)
def test_create_runs_a_job_on_the_host_status_and_delete_leave_nothing(
    lab_sshd: tuple[NetnsLab, SshdHost], tmp_path: Path
) -> None:
    lab, sshd = lab_sshd
    host = sshd.host
    server_home, install = tmp_path / "server", tmp_path / "install"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"server: {{address: {lab.root_address}, port: {_free_port(lab.root_address)},"
        f" home: {server_home}}}\n"
        f"install_dir: {install}\n"
        f"ssh: {{user: {sshd.user}, key_file: {sshd.key_file}, port: {sshd.port},"
        f" known_hosts: {sshd.known_hosts}}}\n"
        "hosts:\n"
        f"  - {{address: {host.address}, name: ns-1, labels: {{rack: a}}, cpus: 2,"
        f" memory: 2Gi, port_base: {PORT_BASE}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env |= {"SHOAL_HOME": str(tmp_path / "nohome"), "SHOAL_CONFIG": str(tmp_path / "cfg.yaml")}
    lab.require_route(host.address)
    agent_pid = None
    try:
        created = shoal(env, "cluster", "create", str(cluster))
        assert created.returncode == 0, created.stdout + created.stderr
        out = created.stdout
        assert f"server: started on https://{lab.root_address}" in out
        assert "[ns-1 " in out and "join: node ns-1 joined" in out
        assert "ready: node ns-1 is READY" in out
        assert "1 of 1 host(s) joined and running" in out

        # a job, through the server's admin context, runs on the namespace host
        admin = env | {"SHOAL_HOME": str(server_home)}
        (tmp_path / "job.yaml").write_text(JOB)
        done = shoal(admin, "--context", "local", "job", "submit", str(tmp_path / "job.yaml"),
                     "--wait", timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        logs = shoal(admin, "--context", "local", "job", "logs", "where-am-i", "--task", "main/0")
        assert f"inet {host.address}/24" in logs.stdout, logs.stdout + logs.stderr
        assert "ran on main" in logs.stdout
        nodes = json.loads(shoal(admin, "--context", "local", "node", "list", "-o", "json").stdout)
        assert [(n["name"], n["state"], n["address"]) for n in nodes] == [
            ("ns-1", "READY", host.address)
        ]

        status = shoal(env, "cluster", "status", str(cluster), "-o", "json")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        agent_pid = int(Path(install / "agent.pid").read_text().split()[0])
        assert shown["hosts"] == [
            {"name": "ns-1", "address": host.address, "ssh": "yes",
             "agent": f"running {agent_pid}", "node": "READY"}
        ]  # fmt: skip
        assert agent_pid in lab.pids(host)

        # an agent that stopped is started again, without a new join
        assert hostctl.terminate(str(install / "agent.pid"), 30.0) == f"stopped {agent_pid}"
        restarted = shoal(env, "cluster", "create", str(cluster))
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert (
            "] join:" not in restarted.stdout
            and "install: this shoal wheel is installed already" in (restarted.stdout)
        )
        assert "start: agent started" in restarted.stdout and "ready: node ns-1 is READY" in (
            restarted.stdout
        )
        agent_pid = int(Path(install / "agent.pid").read_text().split()[0])
        assert f"ok: joined before, agent restarted, agent pid {agent_pid}" in restarted.stdout

        again = shoal(env, "cluster", "create", str(cluster))
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"already joined and running (agent pid {agent_pid}): skipped" in again.stdout
        assert "server: answering on" in again.stdout

        # a host that cannot be reached fails at its step; the others are still handled
        broken = tmp_path / "broken.yaml"
        broken.write_text(
            cluster.read_text()
            + f"  - {{address: {host.address}, name: gone, port: {sshd.port + 1}}}\n"
        )
        partly = shoal(env, "cluster", "create", str(broken))
        assert partly.returncode == 1
        assert "[gone " in partly.stdout and "FAILED at step connect:" in partly.stdout
        assert f"cannot connect to {sshd.user}@{host.address}:{sshd.port + 1}" in partly.stdout
        assert "already joined and running" in partly.stdout  # ns-1 was still checked
        assert "1 host(s) failed: gone (connect)" in partly.stderr
        table = shoal(env, "cluster", "status", str(broken))
        assert table.returncode == 0
        assert "ns-1" in table.stdout and "gone" in table.stdout and "READY" in table.stdout
    finally:
        deleted = shoal(env, "cluster", "delete", str(cluster))
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert f"stop: agent stopped {agent_pid}" in deleted.stdout
    assert "remove: node ns-1 removed from the server" in deleted.stdout
    assert "(the one cluster create started)" in deleted.stdout
    sshd_pids = set(lab.pids(host))
    assert agent_pid not in sshd_pids
    assert len(sshd_pids) == 1  # only sshd itself is left in the host's namespace
    assert hostctl.running_pid(str(server_home / "cluster-server.pid")) is None
    assert not (install / "agent.pid").exists() and not (install / "joined").exists()
    assert not (install / "home" / "identity").exists()
    after = json.loads(shoal(env, "cluster", "status", str(cluster), "-o", "json").stdout)
    assert after["server"].startswith("not answering")
    assert after["hosts"][0]["agent"] == "not running"
