"""A server on the network, for real: `shoal server init` + `start` (HTTPS on 127.0.0.1), machines
joining with tokens (`shoal agent join`) and running with their node certificates
(`shoal agent run`), and every refusal the trust chain promises. One server per module; agents and
CLI calls are real processes, ended by PID (their own process groups)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sqlite3
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from shoal.client import ShoalClient, ShoalError, UntrustedServer
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from tests.envs import is_user_setting
from tests.integration.conftest import port_base

PROTOCOL = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
START = [
    *(sys.executable, "-m", "shoal", "server", "start"),
    *("--kill-grace", "2", "--node-timeout", "8"),  # a lease of 3 s: fencing in seconds
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Network:
    root: Path
    home: Path
    url: str
    env: dict[str, str]
    admin: ShoalClient
    server: subprocess.Popen[bytes]
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ca(self) -> Path:
        return self.home / "pki" / "ca.crt"

    @property
    def admin_token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def shoal(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shoal", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def join_line(self, *options: str) -> list[str]:
        """`shoal node token create OPTIONS`: the one join command it prints, as arguments."""
        made = self.shoal("node", "token", "create", *options)
        assert made.returncode == 0, made.stderr
        line = made.stdout.strip().splitlines()[-1]
        assert line.startswith(f"shoal agent join {self.url} --token shoaljoin1."), line
        return shlex.split(line)[1:]

    def join(self, node: str, line: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
        offset = {"n1": 0, "n2": 1000, "n3": 2000}.get(node, 3000)
        return self.shoal(
            *line,
            "--name",
            node,
            "--home",
            str(self.root / node),
            "--port-base",
            str(port_base() + offset),
            *extra,
        )

    def run_agent(self, node: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{node}.log").open("ab")
        agent = subprocess.Popen(
            [sys.executable, "-m", "shoal", "agent", "run", "--home", str(self.root / node)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.agents.append(agent)
        return agent

    def node(self, name: str) -> dict[str, object] | None:
        return next((n for n in self.admin.nodes() if n["name"] == name), None)

    def wait_ready(self, name: str, timeout_s: float = 30.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            node = self.node(name)
            if node is not None and node["state"] == "READY":
                return node
            time.sleep(0.1)
        raise AssertionError(f"node {name} not READY within {timeout_s}s")

    def node_client(self, node: str) -> httpx.Client:
        """An HTTPS client presenting NODE's certificate, as its agent does."""
        identity = self.root / node / "identity"
        context = ssl.create_default_context(cafile=str(identity / "ca.crt"))
        context.load_cert_chain(str(identity / "node.crt"), str(identity / "node.key"))
        return httpx.Client(base_url=self.url, verify=context, headers=PROTOCOL, timeout=10)


def _stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    root = tmp_path_factory.mktemp("network")
    home = root / "server"
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_CONFIG=str(root / "config.yaml"), SHOAL_HOME=str(root / "shoal-home"))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    init = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal",
            "server",
            "init",
            "--home",
            str(home),
            "--host",
            "127.0.0.1",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    log = (root / "server.log").open("ab")
    server = subprocess.Popen(
        [*START, "--home", str(home), "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    token = (home / "admin.token").read_text().strip()
    admin = ShoalClient(url, token, timeout=10, ca=str(home / "pki" / "ca.crt"))
    running = Network(root, home, url, env, admin, server)
    try:
        deadline = time.monotonic() + 30
        while not admin.health():
            assert server.poll() is None, (root / "server.log").read_text()
            assert time.monotonic() < deadline, "the HTTPS server did not start"
            time.sleep(0.1)
        context = running.shoal(
            "config", "set-context", "lab", "--server", url, "--token-file",
            str(home / "admin.token"), "--ca", str(running.ca), "--use",
        )  # fmt: skip
        assert context.returncode == 0, context.stderr
        yield running
    finally:
        for agent in running.agents:
            _stop(agent)
        admin.close()
        _stop(server)


@pytest.fixture(scope="module")
def worker(network: Network) -> str:
    """Node n1: joined with labels and resource overrides, its agent running."""
    joined = network.join(
        "n1",
        network.join_line("--ttl", "10m", "--uses", "1"),
        "--labels", "zone=a,rack=r7", "--cpus", "2", "--memory", "2Gi", "--gpus", "0",
    )  # fmt: skip
    assert joined.returncode == 0, joined.stderr
    network.run_agent("n1")
    network.wait_ready("n1")
    return "n1"


def _job(network: Network, name: str, command: str, extra: str = "") -> str:
    text = f"version: 1\nname: {name}\nroles:\n  a:\n    command: {command}\n{extra}"
    return str(network.admin.submit(text)[0]["id"])


def test_a_joined_node_runs_jobs_and_keeps_its_identity_across_restarts(
    network: Network, worker: str
) -> None:
    identity = network.root / worker / "identity"
    for name in ("node.key", "node.crt", "ca.crt", "identity.json"):
        assert stat.S_IMODE((identity / name).stat().st_mode) == 0o600, name
    assert "token" not in (identity / "identity.json").read_text()  # never needed again
    node = network.wait_ready(worker)
    assert node["labels"] == {"zone": "a", "rack": "r7"}
    assert (node["cpus"], node["memoryMiB"], node["gpus"]) == (2.0, 2048, 0)
    wide = network.shoal("node", "list", "-o", "wide")
    assert "rack=r7,zone=a" in wide.stdout, wide.stdout

    job = _job(network, "hello", "echo hello from $SHOAL_NODE_NAME")
    assert network.admin.wait(job, timeout_s=60, poll_s=0.1)["state"] == "SUCCEEDED"
    logs = network.shoal("job", "logs", job)
    assert "hello from n1" in logs.stdout, logs.stdout + logs.stderr

    _stop(network.agents[0])  # the agent restarts from its identity on disk alone
    network.agents.pop(0)
    network.run_agent(worker)
    job = _job(network, "again", "echo again")
    assert network.admin.wait(job, timeout_s=60, poll_s=0.1)["state"] == "SUCCEEDED"


def test_a_token_pinning_another_ca_is_refused_as_an_impostor(network: Network) -> None:
    line = network.join_line("--ttl", "10m")
    token = line[line.index("--token") + 1]
    forged = token.rsplit(".", 1)[0] + "." + "0" * 64
    line[line.index("--token") + 1] = forged
    refused = network.join("imp", line)
    assert refused.returncode == 1
    assert "the server's CA does not match the token: possible impostor" in refused.stderr
    assert not (network.root / "imp" / "identity").exists()
    token_id = token.split(".")[1]
    (listed,) = [t for t in network.admin.join_tokens() if t["id"] == token_id]
    assert listed["uses"] == 0  # the server never saw the secret


def _refused(result: subprocess.CompletedProcess[str], code: str) -> str:
    assert result.returncode == 1, result.stdout
    assert code in result.stderr, result.stderr
    return result.stderr


def test_expired_used_up_revoked_and_unknown_tokens_are_refused(network: Network) -> None:
    expiring = network.join_line("--ttl", "1s")
    used_once = network.join_line("--ttl", "10m", "--uses", "1")
    revoked = network.join_line("--ttl", "10m")
    time.sleep(1.2)
    message = _refused(network.join("x1", expiring), "JoinTokenExpired")
    assert "has expired" in message and "shoal node token create" in message

    assert network.join("u1", used_once).returncode == 0
    message = _refused(network.join("u2", used_once), "JoinTokenUsedUp")
    assert "used 1 time(s)" in message

    token_id = revoked[revoked.index("--token") + 1].split(".")[1]
    assert network.shoal("node", "token", "revoke", token_id).returncode == 0
    _refused(network.join("r1", revoked), "JoinTokenRevoked")
    states = {t["id"]: t["state"] for t in network.admin.join_tokens()}
    assert states[token_id] == "revoked"
    listing = network.shoal("node", "token", "list")
    assert token_id in listing.stdout and "revoked" in listing.stdout

    token = used_once[used_once.index("--token") + 1]
    wrong_secret = token.split(".")
    wrong_secret[2] = "S" * 43
    used_once[used_once.index("--token") + 1] = ".".join(wrong_secret)
    _refused(network.join("w1", used_once), "JoinTokenUnknown")
    for node in ("x1", "u2", "r1", "w1"):
        assert not (network.root / node / "identity" / "node.crt").exists()


def test_join_reads_the_token_from_a_file_or_the_environment(network: Network) -> None:
    """Not on the command line, where the host's other users see it in `ps` (issue #24)."""
    line = network.join_line("--ttl", "10m", "--uses", "2")
    token = line.pop(line.index("--token") + 1)
    line.remove("--token")
    token_file = network.root / "join.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    joined = network.join("tf1", line, "--token-file", str(token_file))
    assert joined.returncode == 0, joined.stderr
    assert "node tf1 joined" in joined.stdout
    # a server on loopback: the node's peers are on this machine too
    assert "advertising 127.0.0.1 (the server is on this machine, on loopback" in joined.stdout
    identity = json.loads((network.root / "tf1" / "identity" / "identity.json").read_text())
    assert identity["address"] == "127.0.0.1"
    from_env = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal",
            *line,
            "--name",
            "te1",
            "--home",
            str(network.root / "te1"),
        ],
        env={**network.env, "SHOAL_JOIN_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert from_env.returncode == 0, from_env.stderr
    assert (network.root / "te1" / "identity" / "node.crt").exists()
    # the token's two uses are spent: the server saw it both times
    token_id = token.split(".")[1]
    (listed,) = [t for t in network.admin.join_tokens() if t["id"] == token_id]
    assert listed["uses"] == 2


def test_whoami_verifies_an_https_server_against_the_pinned_ca(network: Network) -> None:
    """whoami connects as `node list` does: through the context's --ca, or $SHOAL_CA."""
    pinned_by_env = {**network.env, "SHOAL_URL": network.url, "SHOAL_CA": str(network.ca),
                     "SHOAL_TOKEN": network.admin_token}  # fmt: skip
    for how, env in (("context lab", network.env), ("$SHOAL_CA", pinned_by_env)):
        for command in (["node", "list"], ["whoami"]):
            result = subprocess.run(
                [sys.executable, "-m", "shoal", *command], env=env,
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert result.returncode == 0, f"{how}: shoal {' '.join(command)}: {result.stderr}"
        assert "user:    admin" in result.stdout, result.stdout
        assert f"server:  {network.url}" in result.stdout, result.stdout


def test_a_client_that_does_not_trust_the_ca_gets_the_fix(network: Network) -> None:
    token = str(network.home / "admin.token")
    added = network.shoal("config", "set-context", "nopin", "--server", network.url,
                          "--token-file", token)  # fmt: skip
    assert added.returncode == 0, added.stderr
    result = network.shoal("--context", "nopin", "job", "list")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"the server at {network.url} presented a certificate" in result.stderr
    assert "--ca" in result.stderr, result.stderr

    other = network.root / "other-cluster"
    init = network.shoal("server", "init", "--home", str(other))
    assert init.returncode == 0, init.stderr
    stranger = ShoalClient(network.url, None, ca=str(other / "pki" / "ca.crt"))
    with pytest.raises(UntrustedServer, match=r"the CA in .*other-cluster.* does not trust"):
        stranger.nodes()


def test_a_node_certificate_is_refused_on_user_endpoints(network: Network, worker: str) -> None:
    with network.node_client(worker) as node:
        for method, path in (("GET", "/api/v1/jobs"), ("GET", "/api/v1/nodes")):
            response = node.request(method, path)
            assert response.status_code == 403, response.text
            assert response.json()["code"] == "ForbiddenNodeError"
            assert f"node {worker} may only call the agent API" in response.json()["message"]
        assert node.post("/api/v1/join-tokens", json={}).status_code == 403
    anonymous = httpx.get(
        f"{network.url}/api/v1/jobs", verify=ssl.create_default_context(cafile=network.ca)
    )
    assert anonymous.status_code == 401
    bearer = httpx.post(
        f"{network.url}/api/v1/agent/orders",
        json={"agent_id": "x", "nodes": [worker], "known": [], "wait_s": 0},
        headers={"Authorization": f"Bearer {network.admin_token}", **PROTOCOL},
        verify=ssl.create_default_context(cafile=network.ca),
    )
    assert bearer.status_code == 403
    assert "takes node certificates only" in bearer.json()["message"]


def _report(node: str) -> dict[str, object]:
    return {
        "agent_id": "rogue",
        "nodes": [
            {
                "name": node,
                "address": "127.0.0.1",
                "cpu_millis": 1000,
                "memory_mib": 1024,
                "gpu_indices": [],
                "port_low": 39000,
                "port_high": 39100,
            }
        ],
    }


def test_a_node_cannot_act_for_another_node(network: Network, worker: str) -> None:
    job = _job(network, "theirs", "echo mine")
    assert network.admin.wait(job, timeout_s=60, poll_s=0.1)["state"] == "SUCCEEDED"
    (task,) = network.admin.job(job)["tasks"]
    assert task["node"] == worker, task
    with sqlite3.connect(network.home / "shoal.db") as db:  # the API shows no attempt ids
        (task_id,) = db.execute("SELECT id FROM tasks WHERE job_id = ?", (job,)).fetchone()
    assert network.join("n2", network.join_line("--ttl", "10m")).returncode == 0

    with network.node_client("n2") as n2:
        for path, body in (
            ("/api/v1/agent/report", _report(worker)),
            ("/api/v1/agent/orders", {"agent_id": "r", "nodes": [worker], "wait_s": 0}),
        ):
            response = n2.post(path, json=body)
            assert response.status_code == 403, (path, response.text)
            assert "certificate of node n2 cannot act for node n1" in response.json()["message"]
        exited = {**_report("n2"), "exited": [{"attempt_id": f"{task_id}.1", "exit_code": 0,
                                               "finished_at": time.time()}]}  # fmt: skip
        assert n2.post("/api/v1/agent/report", json=exited).status_code == 403
        chunk = {"attempt_id": f"{task_id}.1", "stream": "stdout", "offset": 0, "data": "eA=="}
        logs = n2.post("/api/v1/agent/logs", json={"chunks": [chunk]})
        assert logs.status_code == 403, logs.text
        code = n2.get(f"/api/v1/agent/code/{job}")
        assert code.status_code == 403 and "no task placed on node n2" in code.json()["message"]
        own = n2.post("/api/v1/agent/report", json=_report("n2"))
        assert own.status_code == 200, own.text  # for itself it may
    assert network.shoal("node", "remove", "n2").returncode == 0


def test_a_removed_node_is_refused_and_its_agent_exits(network: Network) -> None:
    joined = network.join("n3", network.join_line("--ttl", "10m"), "--gpus", "1")
    assert joined.returncode == 0, joined.stderr
    agent = network.run_agent("n3")
    network.wait_ready("n3")
    job = _job(network, "busy", "sleep 60", extra="    resources: {gpu: 1}\n")
    deadline = time.monotonic() + 30
    while network.admin.job(job)["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    busy = network.shoal("node", "remove", "n3")
    assert busy.returncode == 1 and "still has 1 task(s)" in busy.stderr, busy.stderr
    assert "--force" in busy.stderr
    removed = network.shoal("node", "remove", "n3", "--force")
    assert removed.returncode == 0, removed.stderr
    assert "1 task(s) are stopped by fencing" in removed.stdout, removed.stdout
    node = network.node("n3")  # it stays, cordoned, until fencing has ended its task
    assert node is not None and node["state"] == "CORDONED" and not node["schedulable"], node

    assert agent.wait(30) == 2  # it stops its tasks and exits non-zero
    log = (network.root / "n3.log").read_text()
    assert "node n3 was removed; join again with a new token" in log
    deadline = time.monotonic() + 30  # NOT_READY after the node timeout (8 s): then it goes
    while network.node("n3") is not None:
        assert time.monotonic() < deadline, network.node("n3")
        time.sleep(0.2)
    job_now = network.admin.job(job)
    assert job_now["tasks"][0]["exitClass"] == "PLATFORM_FAILURE", job_now
    again = network.run_agent("n3")
    assert again.wait(30) == 2
    with network.node_client("n3") as n3:
        response = n3.post("/api/v1/agent/report", json=_report("n3"))
    assert response.status_code == 403 and response.json()["code"] == "NodeRemovedError"
    assert network.node("n3") is None  # the refused report registered nothing
    with pytest.raises(ShoalError, match=r"node 'n3' does not exist"):
        network.admin.remove_node("n3")
    history = json.dumps(network.admin.job(job))
    assert "n3" in history
