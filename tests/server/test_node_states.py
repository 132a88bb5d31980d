"""Node administration over the REST API in process: cordon, drain, uncordon (admins only, 404
for an unknown node, 409 for a no-op), the node event log, what the scheduler's snapshot sees,
and LOST rows of an older store read as NOT_READY."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.services.agents import lose_silent_nodes
from shoal.server.services.snapshot import load_snapshot
from shoal.server.settings import ServerSettings
from shoal.store.db import MIGRATIONS, Database, sqlite_url
from tests.server.test_api import agent_headers


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def report(api: TestClient, home: Path, *names: str, version: str | None = "9.9.9") -> None:
    nodes = [
        {
            "name": name,
            "address": "127.0.0.1",
            "cpu_millis": 4000,
            "memory_mib": 4096,
            "gpu_indices": [],
            "port_low": 20000,
            "port_high": 21000,
        }
        for name in names
    ]
    response = api.post(
        "/api/v1/agent/report",
        json={"agent_id": "a", "nodes": nodes, "agent_version": version},
        headers=agent_headers(home),
    )
    assert response.status_code == 200, response.text


def node(api: TestClient, name: str) -> dict[str, object]:
    return next(n for n in api.get("/api/v1/nodes").json() if n["name"] == name)


def schedulable(ctx: ServerContext) -> dict[str, bool]:
    with ctx.db.read() as session:
        snapshot, _ = load_snapshot(ctx, session)
    return {n.name: n.schedulable for n in snapshot.nodes}


def test_cordon_drain_uncordon_change_state_schedulable_and_events(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, "n0", "n1")
    assert node(api, "n0")["agentVersion"] == "9.9.9"
    cordoned = api.post("/api/v1/nodes/n0/cordon")
    assert cordoned.status_code == 200, cordoned.text
    assert cordoned.json()["state"] == "CORDONED" and cordoned.json()["schedulable"] is False
    assert schedulable(ctx) == {"n0": False, "n1": True}  # in the snapshot, not placeable
    drained = api.post("/api/v1/nodes/n0/drain").json()
    assert (drained["state"], drained["hold"]) == ("DRAINED", "DRAINING")  # no task on it
    report(api, home, "n0", "n1")  # a heartbeat keeps the hold
    assert node(api, "n0")["hold"] == "DRAINING"
    back = api.post("/api/v1/nodes/n0/uncordon").json()
    assert (back["state"], back["schedulable"]) == ("READY", True)
    assert schedulable(ctx) == {"n0": True, "n1": True}
    events = api.get("/api/v1/nodes/n0/events").json()
    assert [e["kind"] for e in events] == ["registered", "cordon", "drain", "uncordon"]
    assert events[1]["by"] == "admin" and "cordoned by admin" in events[1]["message"]


def test_a_no_op_is_a_409_naming_the_node(api: TestClient, home: Path) -> None:
    report(api, home, "n0")
    refused = api.post("/api/v1/nodes/n0/uncordon")
    assert refused.status_code == 409
    assert "node 'n0' is neither cordoned nor draining" in refused.json()["message"]
    assert api.post("/api/v1/nodes/n0/cordon").status_code == 200
    again = api.post("/api/v1/nodes/n0/cordon")
    assert again.status_code == 409 and "already cordoned" in again.json()["message"]
    assert [e["kind"] for e in api.get("/api/v1/nodes/n0/events").json()] == [
        "registered",
        "cordon",
    ]


@pytest.mark.parametrize("action", ["cordon", "drain", "uncordon"])
def test_an_unknown_node_is_a_404_naming_it(api: TestClient, home: Path, action: str) -> None:
    report(api, home, "n0")
    response = api.post(f"/api/v1/nodes/nope/{action}")
    assert response.status_code == 404
    assert "node 'nope' does not exist (nodes: n0)" in response.json()["message"]
    assert api.get("/api/v1/nodes/nope/events").status_code == 404


def test_only_admins_may_hold_nodes(api: TestClient, home: Path) -> None:
    report(api, home, "n0")
    created = api.post("/api/v1/users", json={"name": "alice"})
    assert created.status_code == 201, created.text
    alice = {"Authorization": f"Bearer {created.json()['token']}"}
    for action in ("cordon", "drain", "uncordon"):
        response = api.post(f"/api/v1/nodes/n0/{action}", headers=alice)
        assert response.status_code == 403, action
    assert node(api, "n0")["state"] == "READY"
    assert api.get("/api/v1/nodes/n0/events", headers=alice).status_code == 200


def test_a_silent_node_is_not_ready_and_keeps_its_hold(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, "n0")
    assert api.post("/api/v1/nodes/n0/drain").status_code == 200
    now = ctx.clock
    ctx.clock = lambda: now() + ctx.settings.node_timeout_s + 1  # type: ignore[method-assign]
    assert lose_silent_nodes(ctx)
    assert (node(api, "n0")["state"], node(api, "n0")["hold"]) == ("NOT_READY", "DRAINING")
    report(api, home, "n0")
    assert node(api, "n0")["state"] == "DRAINED"
    kinds = [e["kind"] for e in api.get("/api/v1/nodes/n0/events").json()]
    assert kinds == ["registered", "drain", "heartbeats_missed", "came_back"]


@pytest.mark.sqlite_only  # an older store is a SQLite file
def test_lost_rows_of_an_older_store_read_as_not_ready(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0010")
    with sqlite3.connect(tmp_path / "shoal.db") as raw:
        raw.execute(
            "INSERT INTO nodes (name, agent_id, address, cpu_millis, memory_mib, gpu_indices, "
            "port_low, port_high, busy_ports, schedulable, state, last_seen, registered_at, usage)"
            " VALUES ('old', 'a', 'h', 1000, 1024, '[]', 1, 2, '[]', 1, 'LOST', 0, 0, '{}')"
        )
    db.migrate()
    with sqlite3.connect(tmp_path / "shoal.db") as raw:
        row = raw.execute("SELECT state, hold FROM nodes WHERE name = 'old'").fetchone()
    assert row == ("NOT_READY", "NONE")
    db.dispose()
