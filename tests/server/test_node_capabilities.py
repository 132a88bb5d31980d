"""Two agents, one of whose nodes cannot run containers (its report says so, as an agent without
podman does): container tasks are placed only on the other, `job why` names the node that cannot
and why, process tasks still use it, and once no node can run containers a container job is
refused at submission and a waiting one reported infeasible (real app, real SQLite, fake agents
speaking the protocol; issue #24 item 4)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.cli.job_text import why_text
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.image_archives import docker_archive
from tests.server.test_api import agent_headers
from tests.server.test_images import job, push, submit, until
from tests.server.test_security import bearer

NO_PODMAN = {"container": "podman is not installed on this node"}
CONTAINER_JOB = (
    "version: 1\nname: {name}\nruntime: container\nroles:\n  w:\n    instances: {n}\n"
    "    image: team/app:1\n    resources: {{cpu: {cpu}, memory: 64Mi}}\n    command: echo hi\n"
)
PROCESS_JOB = (
    "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{cpu: 0.5, memory: 64Mi}}\n"
    "    command: echo hi\n"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[TestClient, str, Path]]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as client:
        yield client, (home / "admin.token").read_text().strip(), home


def report(client: TestClient, home: Path, agent: str, name: str, **extra: Any) -> None:
    node = {
        "name": name,
        "address": "127.0.0.1",
        "cpu_millis": 1000,
        "memory_mib": 4096,
        "gpu_indices": [],
        "port_low": 20000 if name == "n1" else 21000,
        "port_high": 21000 if name == "n1" else 22000,
        **extra,
    }
    response = client.post(
        "/api/v1/agent/report",
        json={"agent_id": agent, "nodes": [node]},
        headers=agent_headers(home),
    )
    assert response.status_code == 200, response.text


def test_container_tasks_avoid_the_node_that_cannot_run_containers(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    # n1 sorts first and would take both tasks (ties break by name) were it not for its report
    report(client, home, "agent-1", "n1", unsupported=NO_PODMAN)
    report(client, home, "agent-2", "n2", unsupported={})
    assert push(client, admin, "team/app:1", docker_archive(salt=b"caps")).status_code == 201
    made = submit(client, admin, CONTAINER_JOB.format(name="c1", n=2, cpu=0.5))
    assert made.status_code == 201, made.text
    placed_id = made.json()[0]["id"]
    placed = until(lambda: (d := job(client, admin, placed_id))["state"] == "RUNNING" and d)
    assert [t["node"] for t in placed["tasks"]] == ["n2", "n2"]

    # n2 is full now: the next container job waits, and `job why` says n1 cannot run it
    waiting_id = submit(client, admin, CONTAINER_JOB.format(name="c2", n=1, cpu=0.5)).json()[0]
    waiting_id = waiting_id["id"]
    pending = until(lambda: job(client, admin, waiting_id).get("pending"))
    assert pending["code"] == "InsufficientCPU", pending
    why = client.get(f"/api/v1/jobs/{waiting_id}/pending-reason", headers=bearer(admin)).json()
    shown = why_text(why)
    assert "w[0] needs 0.5 cpu; the most free is 0 on n2" in shown, shown
    assert "1 node cannot run containers: podman is not installed on this node (n1)" in shown
    assert why["blockers"] == [placed_id]  # n2 frees up when it ends; n1 never helps

    # a process job still runs on n1
    plain_id = submit(client, admin, PROCESS_JOB.format(name="p")).json()[0]["id"]
    plain = until(lambda: (d := job(client, admin, plain_id))["state"] == "RUNNING" and d)
    assert [t["node"] for t in plain["tasks"]] == ["n1"]

    # n2's agent now says it cannot run containers either: no node ever could
    report(client, home, "agent-2", "n2", unsupported=NO_PODMAN)
    never = until(
        lambda: (
            (p := job(client, admin, waiting_id).get("pending")) and p["code"] == "NeverFits" and p
        )
    )
    both = "2 nodes cannot run containers: podman is not installed on this node (n1, n2)"
    assert both in never["message"]
    why = client.get(f"/api/v1/jobs/{waiting_id}/pending-reason", headers=bearer(admin)).json()
    assert why["blockers"] is None
    assert "it would not fit even on an idle cluster" in why_text(why)
    refused = submit(client, admin, CONTAINER_JOB.format(name="c3", n=1, cpu=0.25))
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "NeverFits"
    assert "cannot run containers: podman is not installed" in refused.json()["message"]
