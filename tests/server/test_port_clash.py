"""Busy ports and refused launches, through the agent protocol (real app, real SQLite, a fake
agent): busy ports reported with a node are never handed out; a launch refused for a taken port
sends the gang back to the queue on other ports, at most ``MAX_PORT_REQUEUES`` times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.services.port_clash import MAX_PORT_REQUEUES
from shoal.server.settings import ServerSettings

JOB = (
    "version: 1\nname: p\nroles:\n  w:\n    resources: {cpu: 1, memory: 64}\n    command: 'true'\n"
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home, scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        yield client


def _agent(home: Path) -> dict[str, str]:
    token = (home / "agent.token").read_text().strip()
    return {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


def _node(busy: list[int]) -> dict[str, Any]:
    return {
        "name": "n0",
        "address": "127.0.0.1",
        "cpu_millis": 4000,
        "memory_mib": 4096,
        "gpu_indices": [],
        "port_low": 20000,
        "port_high": 20100,
        "busy_ports": busy,
    }


def _report(api: TestClient, home: Path, busy: list[int], **extra: Any) -> None:
    body = {"agent_id": "a", "nodes": [_node(busy)], **extra}
    response = api.post("/api/v1/agent/report", json=body, headers=_agent(home))
    assert response.status_code == 200, response.text


def _next_launch(api: TestClient, home: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        body = {"agent_id": "a", "nodes": ["n0"], "wait_s": 1}
        orders = api.post("/api/v1/agent/orders", json=body, headers=_agent(home)).json()
        if orders["launch"]:
            return dict(orders["launch"][0])
    raise AssertionError("no launch order within 10s")


def _refuse(api: TestClient, home: Path, order: dict[str, Any], busy: list[int]) -> None:
    port = order["ports"]["http"][0]
    refused = {
        "attempt_id": order["attempt_id"],
        "exit_code": None,
        "launch_error": f"port {port} (label 'http') is already in use by pid 1 (x)",
        "busy_port": port,
        "finished_at": time.time(),
    }
    _report(api, home, [*busy, port], exited=[refused])


def test_busy_ports_are_not_handed_out_and_shown_on_the_node(api: TestClient, home: Path) -> None:
    _report(api, home, [20000, 20001, 20003])
    assert api.get("/api/v1/nodes").json()[0]["busyPorts"] == [20000, 20001, 20003]
    api.post("/api/v1/jobs", json={"spec": JOB})
    order = _next_launch(api, home)
    assert order["ports"] == {"http": [20002]}
    assert "SHOAL_PORT" in order["env"] and order["env"]["SHOAL_PORT"] == "20002"


def test_refused_launch_requeues_on_fresh_ports_then_fails_after_the_cap(
    api: TestClient, home: Path
) -> None:
    _report(api, home, [])
    (job,) = api.post("/api/v1/jobs", json={"spec": JOB}).json()
    busy: list[int] = []
    for requeue in range(MAX_PORT_REQUEUES):
        order = _next_launch(api, home)
        assert order["env"]["SHOAL_JOB_ATTEMPT"] == str(requeue + 1)  # placed again, no retries
        assert order["ports"]["http"] == [20000 + requeue]  # never a port refused before
        _refuse(api, home, order, busy)
        busy.append(order["ports"]["http"][0])
    order = _next_launch(api, home)
    _refuse(api, home, order, busy)
    detail = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert detail["state"] == "FAILED" and detail["attempt"] == MAX_PORT_REQUEUES + 1
    events = api.get(f"/api/v1/jobs/{job['id']}/events").json()
    clashes = [e for e in events if e["kind"] == "port-clash"]
    assert len(clashes) == MAX_PORT_REQUEUES
    assert sum(e["kind"] == "requeued" for e in events) == MAX_PORT_REQUEUES
    assert "port 20000 is in use" in clashes[0]["message"]
    task = detail["tasks"][0]
    assert task["exitClass"] == "PLATFORM_FAILURE" and "already in use" in task["diagnostics"]
