"""The agent API refuses an agent of another protocol version (or none), naming both versions,
and answers every call with its own version; an agent of the same version is served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings

NODE = {
    "name": "n0",
    "address": "127.0.0.1",
    "cpu_millis": 4000,
    "memory_mib": 4096,
    "gpu_indices": [],
    "port_low": 20000,
    "port_high": 21000,
}
CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("post", "/api/v1/agent/report", {"agent_id": "a", "nodes": [NODE]}),
    ("post", "/api/v1/agent/orders", {"agent_id": "a", "nodes": ["n0"], "wait_s": 0}),
    ("post", "/api/v1/agent/logs", {"chunks": []}),
    ("get", "/api/v1/agent/code/1", None),
]
NONE_SENT = (
    "the agent speaks no protocol version (it predates protocol 1), "
    "the server speaks protocol 2: upgrade the agent"
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home))
    token = (home / "agent.token").read_text().strip()
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def node_names(api: TestClient, home: Path) -> list[str]:
    admin = {"Authorization": f"Bearer {(home / 'admin.token').read_text().strip()}"}
    response = api.get("/api/v1/nodes", headers=admin)
    assert response.status_code == 200, response.text
    return [node["name"] for node in response.json()]


def call(api: TestClient, method: str, path: str, body: Any, version: str | None) -> Any:
    headers = {} if version is None else {PROTOCOL_HEADER: version}
    if method == "get":
        return api.get(path, headers=headers)
    return api.post(path, json=body, headers=headers)


@pytest.mark.parametrize(("method", "path", "body"), CALLS)
@pytest.mark.parametrize(
    ("version", "message"),
    [
        (None, NONE_SENT),
        ("3", "the agent speaks protocol 3, the server speaks protocol 2: upgrade the server"),
        ("1", "the agent speaks protocol 1, the server speaks protocol 2: upgrade the agent"),
        ("one", "the agent speaks an unknown protocol 'one', the server speaks protocol 2: "),
    ],
)
def test_another_protocol_version_is_refused_naming_both(
    api: TestClient, method: str, path: str, body: Any, version: str | None, message: str
) -> None:
    response = call(api, method, path, body, version)
    assert response.status_code == 426, response.text
    assert response.json()["code"] == "ProtocolMismatchError"
    assert response.json()["message"].startswith(message)
    assert response.headers[PROTOCOL_HEADER] == str(PROTOCOL_VERSION)


def test_a_refused_report_registers_nothing(api: TestClient, home: Path) -> None:
    method, path, body = CALLS[0]
    assert call(api, method, path, body, "3").status_code == 426
    assert node_names(api, home) == []


def test_the_same_version_is_served_and_answered_with_it(api: TestClient, home: Path) -> None:
    expected = {"report": 200, "orders": 200, "logs": 200, "1": 404}  # job 1 has no code
    for method, path, body in CALLS:
        response = call(api, method, path, body, str(PROTOCOL_VERSION))
        assert response.status_code == expected[path.rsplit("/", 1)[1]], response.text
        assert response.headers[PROTOCOL_HEADER] == str(PROTOCOL_VERSION)
    assert node_names(api, home) == ["n0"]


def test_a_caller_without_a_token_is_told_that_first(api: TestClient) -> None:
    del api.headers["Authorization"]
    response = call(api, *CALLS[0], None)
    assert response.status_code == 401
