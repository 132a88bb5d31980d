"""Kubernetes Nodes that leave the cluster are forgotten (docs/kubernetes.md, "Nodes"): a node
the Kubernetes agent's report (``fencing: confirmed``) no longer lists goes NOT_READY, and is
deleted once no task of shoal's is active on it; one with a task waits for its end. Nodes of an
agent that does not confirm its Pods' ends (``shoal agent``) are never forgotten this way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.services.silent_nodes import LEFT_AND_FORGOTTEN
from shoal.store.models import Node
from tests.server.test_api import agent_headers
from tests.server.test_fencing import api, ctx, home, node_body, submit, task_row  # noqa: F401


def _report(
    api: TestClient,  # noqa: F811
    home: Path,  # noqa: F811
    nodes: list[str],
    fencing: str = "confirmed",
    **more: Any,
) -> None:
    body = {"agent_id": "k8s", "nodes": [node_body(n) for n in nodes], "fencing": fencing}
    answer = api.post("/api/v1/agent/report", json={**body, **more}, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text


def _nodes(ctx: ServerContext) -> dict[str, str]:  # noqa: F811
    with ctx.db.read() as session:
        return {n.name: n.state for n in session.scalars(select(Node))}


def test_a_node_that_left_with_nothing_on_it_is_forgotten_with_an_event(
    api: TestClient,  # noqa: F811
    home: Path,  # noqa: F811
    ctx: ServerContext,  # noqa: F811
) -> None:
    _report(api, home, ["k1", "k2"])
    assert _nodes(ctx) == {"k1": "READY", "k2": "READY"}
    _report(api, home, ["k2"])  # k1's Node was deleted
    assert _nodes(ctx) == {"k2": "READY"}
    events = api.get("/api/v1/nodes/k1/events").json()
    assert [e["message"] for e in events][-1] == LEFT_AND_FORGOTTEN
    _report(api, home, ["k1", "k2"])  # the same name joins again: a node like any other
    assert _nodes(ctx) == {"k1": "READY", "k2": "READY"}


def test_a_node_that_left_with_a_task_on_it_waits_for_the_task_to_end(
    api: TestClient,  # noqa: F811
    home: Path,  # noqa: F811
    ctx: ServerContext,  # noqa: F811
) -> None:
    _report(api, home, ["k1"])
    job_id = submit(api, "on-k1")
    assert run_cycle(ctx) == 1
    attempt_id, _, _, node = task_row(ctx, job_id)
    started = {"attempt_id": attempt_id, "pid": 0, "started_at": 1.0, "epoch": 0}
    _report(api, home, ["k1"], running=[started])
    _report(api, home, [], running=[started])  # the Node is gone, its Pod not yet
    assert _nodes(ctx) == {node: "NOT_READY"}  # kept: its Pod may still run
    ended = {"attempt_id": attempt_id, "exit_code": 0, "finished_at": 2.0, "epoch": 0}
    _report(api, home, [], exited=[ended])
    assert _nodes(ctx) == {}
    assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "SUCCEEDED"


def test_an_agent_that_does_not_confirm_ends_keeps_its_nodes(
    api: TestClient,  # noqa: F811
    home: Path,  # noqa: F811
    ctx: ServerContext,  # noqa: F811
) -> None:
    _report(api, home, ["n1", "n2"], fencing="lease")
    _report(api, home, ["n2"], fencing="lease")
    assert set(_nodes(ctx)) == {"n1", "n2"}
