"""What the trust chain refuses, across namespace hosts: a token whose CA hash names another CA,
an expired token, a used-up token, a client that does not pin the cluster's CA, a node
certificate on a user endpoint or acting for another node, and a removed node's agent."""

from __future__ import annotations

import os
import ssl
import time

import httpx
import pytest

from shoal.client import ShoalClient, UntrustedServer
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)


@pytest.fixture
def rack(make_rack: MakeRack) -> Rack:
    return make_rack(nodes=2)


def _join_as(rack: Rack, line: list[str], name: str) -> tuple[int, str]:
    """Join host 3 under another name and home (as a second machine would)."""
    host = rack.lab.host(3)
    done = rack.on_host(
        host, *line, "--name", name, "--address", host.address, "--home", str(rack.root / name)
    )
    return done.returncode, done.stdout + done.stderr


def _node_client(rack: Rack, node: str) -> httpx.Client:
    identity = rack.agent_home(node) / "identity"
    context = ssl.create_default_context(cafile=str(identity / "ca.crt"))
    context.load_cert_chain(str(identity / "node.crt"), str(identity / "node.key"))
    rack.lab.require_route(rack.server_host.address)
    headers = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    return httpx.Client(base_url=rack.url, verify=context, headers=headers, timeout=10)


def test_bad_tokens_are_refused_with_their_reason(rack: Rack) -> None:
    line = rack.join_line("--ttl", "10m", "--uses", "1")
    token = line[line.index("--token") + 1]
    forged = [*line]
    forged[line.index("--token") + 1] = token[: -len("0000")] + (
        "1111" if not token.endswith("1111") else "2222"
    )
    code, said = _join_as(rack, forged, "forged")
    assert code != 0 and "possible impostor" in said, said
    assert not (rack.root / "forged" / "identity" / "node.crt").exists()

    code, said = _join_as(rack, line, "first")
    assert code == 0, said
    code, said = _join_as(rack, line, "second")
    assert code != 0 and "used" in said.lower(), said

    short = rack.join_line("--ttl", "1s")
    time.sleep(1.5)
    code, said = _join_as(rack, short, "late")
    assert code != 0 and "expired" in said.lower(), said
    made = {p.parent.parent.name for p in rack.root.glob("*/identity/node.crt")}
    assert made == {"n1", "n2", "first"}  # a node appears once its agent runs


def test_a_client_without_the_clusters_ca_is_refused(rack: Rack) -> None:
    token = (rack.home / "admin.token").read_text().strip()
    rack.lab.require_route(rack.server_host.address)
    unpinned = ShoalClient(rack.url, token, timeout=5.0)
    with pytest.raises(UntrustedServer):
        unpinned.nodes()
    unpinned.close()
    env = {k: v for k, v in rack.env.items() if k != "SHOAL_CONFIG"}
    env.update(SHOAL_URL=rack.url, SHOAL_TOKEN=token, SHOAL_CONFIG=str(rack.root / "none.yaml"))
    done = rack.shoal("node", "list", env=env)
    assert done.returncode == 1 and "does not trust" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_certificate_acts_only_for_its_node_and_dies_with_it(rack: Rack) -> None:
    with _node_client(rack, "n1") as n1:
        assert n1.get("/api/v1/jobs").status_code == 403
        assert n1.get("/api/v1/nodes").status_code == 403
        other = {
            "name": "n2",
            "address": rack.node_host("n2").address,
            "cpu_millis": 1000,
            "memory_mib": 2048,
            "gpu_indices": [],
            "port_low": 20000,
            "port_high": 21000,
        }
        report = {"agent_id": "n1", "nodes": [other]}
        refused = n1.post("/api/v1/agent/report", json=report)
        assert refused.status_code == 403, refused.text
        assert "n2" in refused.json()["message"]
    removed = rack.shoal("node", "remove", "n2", "--force")
    assert removed.returncode == 0, removed.stderr
    agent = rack.agents["n2"]
    assert agent.wait(timeout=30) == 2
    said = (rack.root / "n2.log").read_text()
    assert "was removed" in said, said[-1000:]
    assert "n2" not in rack.nodes()
    assert os.path.exists(rack.agent_home("n2") / "identity" / "node.crt")  # kept, but refused
