"""Task ports checked against the host: a foreign process on a task port is never handed to a
task, whether the agent saw it before placement (busy ports in its node report) or only just
before launch (the probe refuses the launch and the job is placed again on free ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.integration.conftest import LocalCluster, port_base

LEARNER = """\
import os, socket
port = int(os.environ["SHOAL_PORT"])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", port))  # raises EADDRINUSE if a foreign process holds the port
server.listen()
print("learner listening on", port, flush=True)
conn, _ = server.accept()
conn.sendall(b"learner")
conn.close()
"""

ACTOR = """\
import os, socket, time
host, port = os.environ["SHOAL_LEARNER_HOSTS"].split(",")[0].rsplit(":", 1)
deadline = time.monotonic() + 60
while True:
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            print("reply:", conn.recv(64).decode(), flush=True)
            break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
"""

FOREIGN = """\
import socket, sys
server = socket.socket()
# as most servers do: a connection another test's task closed on this port (TIME_WAIT) does not
# keep it from listening there
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(b"foreign")
    # The peer closes first: an active close here would leave sockets on this port in FIN_WAIT
    # for up to a minute after this process is killed, taking the port from later tests.
    conn.settimeout(5)
    try:
        while conn.recv(1024):
            pass
    except OSError:
        pass
    conn.close()
"""


def rl_job(scripts: Path) -> str:
    (scripts / "learner.py").write_text(LEARNER)
    (scripts / "actor.py").write_text(ACTOR)
    return textwrap.dedent(
        f"""\
        version: 1
        name: rl
        roles:
          learner:
            resources: {{cpu: 1, memory: 256}}
            command: python {scripts / "learner.py"}
          actor:
            resources: {{cpu: 1, memory: 256}}
            command: python {scripts / "actor.py"}
        """
    )


def _listen(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    script = tmp_path / "foreign.py"
    script.write_text(FOREIGN)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _outputs(cluster: LocalCluster, job_id: str) -> tuple[str, str]:
    learner = cluster.log(job_id, "learner") + cluster.log(job_id, "learner", stream="stderr")
    return learner, cluster.log(job_id, "actor")


def _task_ports(cluster: LocalCluster, job_id: str) -> set[int]:
    return {p for t in cluster.client.job(job_id)["tasks"] for p in t["ports"]["http"]}


def test_busy_ports_seen_by_the_agent_are_never_placed(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    first = [port_base(), port_base() + 1000]  # the first task port of node-0 and node-1
    procs = [_listen(tmp_path, port) for port in first]
    try:
        cluster.wait_for(
            lambda: all(
                n["busyPorts"][:1] == [port]
                for n, port in zip(cluster.client.nodes(), first, strict=True)
            )
        )
        job_id = cluster.submit(rl_job(tmp_path))
        job = cluster.wait(job_id)
        learner, actor = _outputs(cluster, job_id)
        assert job["state"] == "SUCCEEDED", (job, learner, actor)
        assert "Address already in use" not in learner
        assert actor.strip() == "reply: learner"
        assert not _task_ports(cluster, job_id) & set(first)
        kinds = [e["kind"] for e in cluster.client.events(job_id)]
        assert "port-clash" not in kinds  # placed on free ports at once
        wide = subprocess.run(
            [sys.executable, "-m", "shoal", "node", "list", "-o", "wide"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "SHOAL_HOME": str(cluster.home), "SHOAL_CONTEXT": "local"},
        ).stdout
        assert "ports held by others" in wide and all(str(port) in wide for port in first), wide
    finally:
        _stop(procs)


def test_port_taken_after_placement_is_refused_and_the_job_placed_again(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """The agent is paused (SIGSTOP) while the job is placed; a foreign process then takes the
    learner's port; once resumed, the agent's probe refuses the launch and the job runs on
    other ports."""
    os.kill(cluster.info.agent_pid, signal.SIGSTOP)
    procs: list[subprocess.Popen[str]] = []
    try:
        job_id = cluster.submit(rl_job(tmp_path))
        cluster.wait_for(lambda: cluster.client.job(job_id)["state"] == "RUNNING")
        tasks = cluster.client.job(job_id)["tasks"]
        taken = next(t for t in tasks if t["role"] == "learner")["ports"]["http"][0]
        procs.append(_listen(tmp_path, taken))
    finally:
        os.kill(cluster.info.agent_pid, signal.SIGCONT)
    try:
        job = cluster.wait(job_id)
        learner, actor = _outputs(cluster, job_id)
        assert job["state"] == "SUCCEEDED", (job, learner, actor)
        assert "Address already in use" not in learner
        assert actor.strip() == "reply: learner"
        assert taken not in _task_ports(cluster, job_id)
        events = cluster.client.events(job_id)
        clash = [e for e in events if e["kind"] == "port-clash"]
        assert len(clash) == 1 and f"port {taken}" in clash[0]["message"]
        assert any(e["kind"] == "requeued" for e in events)
        assert cluster.client.job(job_id)["attempt"] == 2  # a fresh gang, on fresh ports
    finally:
        _stop(procs)
