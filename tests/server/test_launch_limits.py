"""What the server tells an agent to hold a task to, and what it keeps of what a node cannot
do (real app, real SQLite, a fake agent speaking the protocol)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.protocol import DEFAULT_TASK_PIDS
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.server.test_port_clash import _agent, _next_launch, _node


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home, scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        yield client


JOB = """\
version: 1
name: limited
roles:
  w:
    resources: {cpu: 1.5, memory: 300Mi, shm: 64Mi, pids: 100}
    command: 'true'
  v:
    resources: {cpu: 0.25, memory: 64}
    command: 'true'
"""


def _report(api: TestClient, home: Path, node: dict[str, Any]) -> None:
    body = {"agent_id": "a", "nodes": [node]}
    response = api.post("/api/v1/agent/report", json=body, headers=_agent(home))
    assert response.status_code == 200, response.text


def test_launch_orders_carry_the_reserved_limits_and_the_runtime(
    api: TestClient, home: Path
) -> None:
    _report(api, home, _node([]))
    assert api.post("/api/v1/jobs", json={"spec": JOB}).status_code == 201
    _next_launch(api, home)  # the gang is placed
    body = {"agent_id": "a", "nodes": ["n0"], "wait_s": 1}
    answer = api.post("/api/v1/agent/orders", json=body, headers=_agent(home)).json()
    orders = {o["role"]: o for o in answer["launch"]}
    assert orders["w"]["runtime"] == "process"
    assert orders["w"]["limits"] == {
        "cpu_millis": 1500,
        "memory_mib": 300,
        "pids": 100,
        "shm_mib": 64,
        "gpu_indices": [],
    }
    assert orders["v"]["limits"]["pids"] == DEFAULT_TASK_PIDS
    assert orders["v"]["limits"]["shm_mib"] is None


def test_what_a_node_cannot_do_is_kept_and_shown(api: TestClient, home: Path) -> None:
    cannot = {"container": "podman is not installed on this node", "pids": "no pids hierarchy"}
    _report(api, home, {**_node([]), "unsupported": cannot})
    assert api.get("/api/v1/nodes").json()[0]["unsupported"] == cannot
    _report(api, home, _node([]))  # an agent that does not say keeps what was said
    assert api.get("/api/v1/nodes").json()[0]["unsupported"] == cannot
    _report(api, home, {**_node([]), "unsupported": {}})
    assert api.get("/api/v1/nodes").json()[0]["unsupported"] == {}
