"""Node certificates renewed over mutual TLS, and the cluster's CA rotated, for real: a server on
the network (`shoal server init` + `start`, HTTPS on 127.0.0.1) that issues 40-second node
certificates ($SHOAL_NODE_CERT_LIFETIME_S), agents (`shoal agent join` + `run`) that ask every
second whether to renew ($SHOAL_CERT_CHECK_S) and renew after two thirds of the lifetime, and
the admin's `shoal admin ca rotate|status|bundle|finish`. One server per module; agents and CLI
calls are real processes, ended by PID (their own process groups)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from shoal.client import ShoalClient
from shoal.pki import key_pem, load_private_key, new_private_key, node_csr
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.ca import PkiFiles, sign_node_csr
from tests.envs import is_user_setting
from tests.integration.conftest import port_base

PROTOCOL = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
LIFETIME_S = 40.0  # renewed after 2/3 of it: 27 s
START = [
    *(sys.executable, "-m", "shoal", "server", "start"),
    *("--kill-grace", "2", "--node-timeout", "8"),  # a lease of 3 s: a lost node shows quickly
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    root: Path
    home: Path
    url: str
    env: dict[str, str]
    admin_ca: Path  # the CA file the admin's CLI context pins (a copy, as an admin's would be)
    server: subprocess.Popen[bytes]
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def admin(self) -> ShoalClient:
        token = (self.home / "admin.token").read_text().strip()
        return ShoalClient(self.url, token, timeout=10, ca=str(self.admin_ca))

    def shoal(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shoal", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def join(self, node: str, offset: int) -> None:
        made = self.shoal("node", "token", "create", "--ttl", "10m")
        assert made.returncode == 0, made.stderr
        line = shlex.split(made.stdout.strip().splitlines()[-1])[1:]
        joined = self.shoal(
            *line, "--name", node, "--home", str(self.root / node), "--cpus", "1",
            "--memory", "1Gi", "--gpus", "0", "--port-base", str(port_base() + offset),
        )  # fmt: skip
        assert joined.returncode == 0, joined.stderr

    def run_agent(self, node: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{node}.log").open("ab")
        agent = subprocess.Popen(
            [sys.executable, "-m", "shoal", "agent", "run", "--home", str(self.root / node)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.agents[node] = agent
        return agent

    def identity(self, node: str) -> Path:
        return self.root / node / "identity"

    def node_state(self, name: str) -> str | None:
        with closing(self.admin()) as admin:
            found = [n for n in admin.nodes() if n["name"] == name]
        return str(found[0]["state"]) if found else None

    def wait_ready(self, name: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.node_state(name) != "READY":
            assert time.monotonic() < deadline, f"node {name} not READY within {timeout_s}s"
            time.sleep(0.2)

    def ca_status(self) -> dict[str, object]:
        result = self.shoal("admin", "ca", "status", "-o", "json")
        assert result.returncode == 0, result.stderr
        status: dict[str, object] = json.loads(result.stdout)
        return status

    def run_job(self, name: str, node: str) -> None:
        text = f"version: 1\nname: {name}\nroles:\n  a:\n    command: echo on $SHOAL_NODE_NAME\n"
        with closing(self.admin()) as admin:
            job = str(admin.submit(text)[0]["id"])
            done = admin.wait(job, timeout_s=60, poll_s=0.1)
        assert done["state"] == "SUCCEEDED", done
        assert done["tasks"][0]["node"] == node, done


def client_with(identity: Path, cert: Path, key: Path, url: str) -> httpx.Client:
    """An HTTPS client presenting CERT/KEY, trusting the node's CA file, as an agent does."""
    context = ssl.create_default_context(cafile=str(identity / "ca.crt"))
    context.load_cert_chain(str(cert), str(key))
    return httpx.Client(base_url=url, verify=context, headers=PROTOCOL, timeout=10)


def renewal_body(node: str) -> dict[str, str]:
    return {"csr": node_csr(new_private_key(), node).decode()}


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def expiry_of(path: Path) -> float:
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()


def _stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("renewal")
    home = root / "server"
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(
        SHOAL_CONFIG=str(root / "config.yaml"),
        SHOAL_HOME=str(root / "shoal-home"),
        SHOAL_NODE_CERT_LIFETIME_S=str(LIFETIME_S),  # the server's
        SHOAL_CERT_CHECK_S="1",  # the agents'
    )
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    init = subprocess.run(
        [sys.executable, "-m", "shoal", "server", "init", "--home", str(home), "--host",
         "127.0.0.1"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    admin_ca = root / "admin-ca.crt"
    shutil.copyfile(home / "pki" / "ca.crt", admin_ca)
    log = (root / "server.log").open("ab")
    server = subprocess.Popen(
        [*START, "--home", str(home), "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running = Cluster(root, home, url, env, admin_ca, server)
    try:
        deadline = time.monotonic() + 30
        with closing(running.admin()) as admin:
            while not admin.health():
                assert server.poll() is None, (root / "server.log").read_text()
                assert time.monotonic() < deadline, "the HTTPS server did not start"
                time.sleep(0.1)
        context = running.shoal(
            "config", "set-context", "lab", "--server", url, "--token-file",
            str(home / "admin.token"), "--ca", str(admin_ca), "--use",
        )  # fmt: skip
        assert context.returncode == 0, context.stderr
        yield running
    finally:
        for agent in running.agents.values():
            _stop(agent)
        _stop(server)


@pytest.fixture(scope="module")
def worker(cluster: Cluster) -> str:
    """Node n1, joined, its agent running."""
    cluster.join("n1", 0)
    cluster.run_agent("n1")
    cluster.wait_ready("n1")
    return "n1"


def test_a_short_lived_certificate_renews_and_the_node_stays_ready(
    cluster: Cluster, worker: str
) -> None:
    identity = cluster.identity(worker)
    first = cluster.root / "n1-first"
    first.mkdir()
    for name in ("node.crt", "node.key"):
        shutil.copy2(identity / name, first / name)
    first_serial, first_expiry = serial_of(first / "node.crt"), expiry_of(first / "node.crt")
    assert first_expiry - time.time() <= LIFETIME_S + 1

    deadline = time.monotonic() + LIFETIME_S
    while serial_of(identity / "node.crt") == first_serial:  # renewed after 2/3 of it
        assert time.monotonic() < deadline, (cluster.root / "n1.log").read_text()
        assert cluster.node_state(worker) == "READY"
        time.sleep(0.5)
    assert time.time() < first_expiry  # before the old one ran out
    for name in ("node.key", "node.crt", "ca.crt"):
        assert stat.S_IMODE((identity / name).stat().st_mode) == 0o600, name
    assert not list(identity.glob("*.next")) and not list(identity.glob(".*.tmp"))
    assert expiry_of(identity / "node.crt") > first_expiry

    # The old certificate is not revoked (calls under way may use it) but cannot renew again.
    with client_with(identity, first / "node.crt", first / "node.key", cluster.url) as old:
        refused = old.post("/api/v1/agent/certificate", json=renewal_body(worker))
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "SupersededCertificateError"
        assert "only a node's newest certificate renews" in refused.json()["message"]
        assert old.get("/api/v1/agent/certificate").status_code == 200

    # Past the first certificate's end, the node is READY throughout and takes work.
    while time.time() < first_expiry + 3:
        assert cluster.node_state(worker) == "READY", (cluster.root / "n1.log").read_text()
        time.sleep(0.5)
    cluster.run_job("after-expiry", worker)
    expired = client_with(identity, first / "node.crt", first / "node.key", cluster.url)
    with expired, pytest.raises(httpx.TransportError):  # the TLS handshake refuses it
        expired.get("/api/v1/agent/certificate")
    events = cluster.shoal("node", "events", worker)
    assert "certificate renewed" in events.stdout, events.stdout
    log = (cluster.root / "n1.log").read_text()
    assert "renewal of node n1 failed" not in log, log


def test_renewal_asks_for_a_new_key_and_a_removed_nodes_certificates_are_refused(
    cluster: Cluster,
) -> None:
    cluster.join("n2", 1000)  # no agent: this test renews by hand
    identity = cluster.identity("n2")
    with client_with(identity, identity / "node.crt", identity / "node.key", cluster.url) as n2:
        own = load_private_key((identity / "node.key").read_bytes())
        same_key = {"csr": node_csr(own, "n2").decode()}
        reused = n2.post("/api/v1/agent/certificate", json=same_key)
        assert reused.status_code == 422 and "a renewal needs a new key" in reused.text
        other = n2.post("/api/v1/agent/certificate", json=renewal_body("n1"))
        assert other.status_code == 422 and "common name must be the node's name" in other.text
        key = new_private_key()
        renewed = n2.post("/api/v1/agent/certificate", json={"csr": node_csr(key, "n2").decode()})
        assert renewed.status_code == 200, renewed.text
    (identity / "renewed.crt").write_text(renewed.json()["certificate"])
    (identity / "renewed.key").write_bytes(key_pem(key))

    removed = cluster.shoal("node", "remove", "n2")
    assert removed.returncode == 0, removed.stderr
    for cert, key_file in (("node.crt", "node.key"), ("renewed.crt", "renewed.key")):
        with client_with(identity, identity / cert, identity / key_file, cluster.url) as n2:
            response = n2.post("/api/v1/agent/certificate", json=renewal_body("n2"))
        assert response.status_code == 403, (cert, response.text)
        assert response.json()["code"] == "NodeRemovedError"
        assert "node n2 was removed; join again" in response.json()["message"]


def test_the_ca_rotates_and_the_old_one_is_refused_after_finish(
    cluster: Cluster, worker: str
) -> None:
    pki = PkiFiles.of(cluster.home)
    old_ca = pki.ca_hash()
    stranger = cluster.root / "stranger"  # a certificate of the old CA, valid for an hour
    stranger.mkdir()
    key = new_private_key()
    (stranger / "node.key").write_bytes(key_pem(key))
    signed = sign_node_csr(pki, node_csr(key, "stranger").decode(), "stranger", 3600)
    (stranger / "node.crt").write_text(signed.pem)
    shutil.copyfile(cluster.identity(worker) / "ca.crt", stranger / "ca.crt")
    with client_with(stranger, stranger / "node.crt", stranger / "node.key", cluster.url) as s:
        before = s.get("/api/v1/agent/certificate")  # the TLS layer lets it in; the app says no
    assert before.status_code == 403 and before.json()["code"] == "UnknownNodeCertificateError"
    cluster.join("n3", 2000)  # joined, its agent never runs: it stays on the old CA

    rotated = cluster.shoal("admin", "ca", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    assert "staged the next CA" in rotated.stdout, rotated.stdout
    again = cluster.shoal("admin", "ca", "rotate")
    assert again.returncode == 1 and "under way already" in again.stderr, again.stderr
    status = cluster.ca_status()
    assert status["rotating"] is True and status["current"]["sha256"] == old_ca  # type: ignore[index]
    new_ca = status["next"]["sha256"]  # type: ignore[index]

    deadline = time.monotonic() + 20  # the agent asks every second, then renews
    while "n1" in cluster.ca_status()["pending"]:  # type: ignore[operator]
        assert time.monotonic() < deadline, (cluster.root / "n1.log").read_text()
        time.sleep(0.3)
    identity = cluster.identity(worker)
    assert (identity / "ca.crt").read_text().count("BEGIN CERTIFICATE") == 2
    assert cluster.node_state(worker) == "READY"
    cluster.run_job("during-rotation", worker)

    refused = cluster.shoal("admin", "ca", "finish")
    assert refused.returncode == 1, refused.stdout
    assert "have no certificate of the new CA yet: n3" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr

    bundle = cluster.shoal("admin", "ca", "bundle", "--to", str(cluster.admin_ca))
    assert bundle.returncode == 0 and "wrote 2 CA certificate(s)" in bundle.stdout, bundle
    finished = cluster.shoal("admin", "ca", "finish", "--force")
    assert finished.returncode == 0, finished.stderr
    assert f"the CA is now sha256 {new_ca}" in finished.stdout, finished.stdout
    assert "removed (they were still on the old CA): n3" in finished.stdout, finished.stdout
    assert pki.ca_hash() == new_ca and not pki.rotating()

    # The agent stays connected through the switch, and past a node timeout (8 s) after it.
    until = time.monotonic() + 10
    while time.monotonic() < until:
        assert cluster.node_state(worker) == "READY", (cluster.root / "n1.log").read_text()
        time.sleep(0.5)
    cluster.run_job("after-finish", worker)
    status = cluster.ca_status()
    assert status["rotating"] is False and status["current"]["sha256"] == new_ca  # type: ignore[index]

    # A certificate of the old CA is refused by the TLS handshake now.
    old_ca_client = client_with(stranger, stranger / "node.crt", stranger / "node.key", cluster.url)
    with old_ca_client, pytest.raises(httpx.TransportError):
        old_ca_client.get("/api/v1/agent/certificate")
    # A new join pins the new CA (the old tokens were revoked with it).
    cluster.join("n4", 3000)
    joined = x509.load_pem_x509_certificate((cluster.identity("n4") / "node.crt").read_bytes())
    current = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    joined.verify_directly_issued_by(current)
    audit = cluster.shoal("admin", "audit", "--action", "ca.", "-o", "json")
    actions = [row["action"] for row in json.loads(audit.stdout)]
    assert actions == ["ca.finish", "ca.rotate"], audit.stdout
