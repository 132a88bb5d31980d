"""A task's port taken by another user's process (docs/proxy.md): tasks share their node's
network, so before a task listens another user's process may bind its port. The agent then
forwards nothing to it: the listener on a task's port must be the task's own user, so no user's
request (nor the task's proxy token) reaches a squatter."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import LocalCluster, local_cli, running_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks switch users only as root")
SQUATTER_UID = 1_999_999_999  # below the pool's base: no shoal user's uid
LISTEN = """\
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen()
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(b"squatter got it")
    conn.close()
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path / "shoal-home", nodes=1) as running:
        yield running


def test_nothing_is_forwarded_to_another_users_process_on_a_tasks_port(
    cluster: LocalCluster,
) -> None:
    job = cluster.submit("version: 1\nname: quiet\nroles:\n  main:\n    command: sleep 300\n")
    running = lambda: [t["state"] for t in cluster.client.job(job)["tasks"]] == ["RUNNING"]  # noqa: E731
    cluster.wait_for(running, 60)
    port = cluster.client.job(job)["tasks"][0]["ports"]["http"][0]
    squatter = subprocess.Popen(
        ["setpriv", f"--reuid={SQUATTER_UID}", f"--regid={SQUATTER_UID}", "--clear-groups",
         "/usr/bin/python3", "-c", LISTEN, str(port)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "listening\n"
        with socket.create_connection(("127.0.0.1", port)) as direct:  # it does listen there
            assert direct.recv(64) == b"squatter got it"
        forwarded = local_cli(cluster, "job", "port-forward", job, "--stdio", "http", timeout=60)
        assert forwarded.returncode == 1, forwarded.stdout
        assert "held by another user's process" in forwarded.stderr, forwarded.stderr
        assert "squatter" not in forwarded.stdout
    finally:
        os.killpg(squatter.pid, 9)
        squatter.wait()
    cluster.client.stop(job)
