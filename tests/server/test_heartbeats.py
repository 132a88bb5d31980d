"""Heartbeats at rest (docs/cluster.md, "Heartbeats cost reads, not writes"): a report that
changes nothing is answered from reads; a due ``last_seen`` is written through the group commit
(durable before the answer, without waking the scheduler); a node lost between the read and the
write takes the full report path and comes back; the answer advises the heartbeat interval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from shoal import protocol
from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.services import agents
from shoal.server.settings import ServerSettings
from shoal.store import models
from shoal.store.models import Node
from tests.server.test_api import agent_headers
from tests.server.test_fencing import node_body

NODE = node_body("n0", gpus=0)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home, scheduler="thread"))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        yield client


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _report(api: TestClient, home: Path, usage: dict[str, float] | None = None) -> dict:
    body = {"agent_id": "a", "nodes": [{**NODE, "usage": usage or {}}], "agent_version": "1"}
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _node(ctx: ServerContext) -> Node:
    with ctx.db.read() as session:
        found = session.scalar(select(Node).where(Node.name == "n0"))
        assert found is not None
        return found


def test_the_answer_advises_a_third_of_the_lease_between_2_and_10_s(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    answer = _report(api, home)
    assert answer["heartbeat_s"] == pytest.approx(ctx.settings.lease_s / 3)  # 14 s / 3
    assert ServerSettings(home=home, node_timeout_s=8, kill_grace_s=1).heartbeat_s == 2.0
    assert ServerSettings(home=home, node_timeout_s=3600).heartbeat_s == 10.0


def test_a_quiet_report_writes_a_due_heartbeat_in_a_group_commit_and_wakes_no_scheduler(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    clock = Clock()
    ctx.clock = clock  # type: ignore[method-assign]
    _report(api, home)  # registers: the write path
    assert _node(ctx).last_seen == clock.now
    batches, woken = ctx.commits.batches, ctx.scheduler_wake.generation
    clock.now += 1.0  # not due yet (heartbeat_write_s: 5 s)
    _report(api, home, {"cpu_percent": 5.0})
    assert _node(ctx).last_seen == clock.now - 1.0 and ctx.commits.batches == batches
    clock.now += ctx.settings.heartbeat_write_s  # due: 6 s after it was written
    _report(api, home, {"cpu_percent": 7.0})
    stored = _node(ctx)
    assert (stored.last_seen, stored.usage) == (clock.now, {"cpu_percent": 7.0})
    assert ctx.commits.batches == batches + 1  # one group commit, durable before the answer
    assert ctx.scheduler_wake.generation == woken  # a heartbeat changes nothing it reads


def test_a_node_lost_between_the_read_and_the_write_comes_back_through_the_full_path(
    api: TestClient, home: Path, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    ctx.clock = clock  # type: ignore[method-assign]
    _report(api, home)
    clock.now += ctx.settings.heartbeat_write_s + 1
    quiet_report = agents.quiet_report

    def lost_after_the_read(*args: object) -> object:
        quiet = quiet_report(*args)  # type: ignore[arg-type]
        with ctx.db.write() as session:  # the silent-node check, just then
            session.execute(update(Node).values(state="NOT_READY"))
        return quiet

    monkeypatch.setattr(agents, "quiet_report", lost_after_the_read)
    _report(api, home)
    monkeypatch.undo()
    assert (_node(ctx).state, _node(ctx).last_seen) == ("READY", clock.now)


def test_an_identifier_longer_than_its_column_is_refused_and_free_text_is_cut(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    """PostgreSQL enforces VARCHAR lengths (SQLite does not): a node name over 253 characters
    (longer than a Kubernetes Node's may be) is a 422 naming the field, not a failed write; a
    platform's hold text is cut to 255."""
    body = {"agent_id": "a", "nodes": [{**NODE, "name": "n" * 254}], "agent_version": "1"}
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 422, answer.text
    assert "name" in answer.text and "253" in answer.text
    held = {**NODE, "platform_hold": "cordoned: " + "x" * 400}
    body = {"agent_id": "a", "nodes": [held], "agent_version": "1"}
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text
    hold = _node(ctx).platform_hold
    assert hold is not None and len(hold) == 255 and hold.startswith("cordoned: x")
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 200 and _node(ctx).platform_hold == hold  # quiet: the same


def test_the_protocol_allows_the_node_names_the_store_holds() -> None:
    assert protocol.NODE_NAME_CHARS == models.NODE_NAME_CHARS == 253
    assert models.Node.__table__.c.name.type.length == models.NODE_NAME_CHARS  # type: ignore[attr-defined]
