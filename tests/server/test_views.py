"""Views over the job API: job references (id, name, ``user~name``), everyone's queue, blockers
named with their owner, event order, the state filter and ``since``, and the read-only plan."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.services.events import record
from shoal.server.settings import ServerSettings

JOB = "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{gpu: {gpu}}}\n    command: x\n"


@dataclass
class Server:
    client: TestClient
    ctx: ServerContext
    home: Path
    admin: str

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def user(self, name: str) -> str:
        made = self.client.post("/api/v1/users", json={"name": name}, headers=self.as_admin)
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    @property
    def as_admin(self) -> dict[str, str]:
        return self.headers(self.admin)

    def submit(self, token: str, name: str, gpu: int = 0) -> str:
        made = self.client.post(
            "/api/v1/jobs",
            json={"spec": JOB.format(name=name, gpu=gpu)},
            headers=self.headers(token),
        )
        assert made.status_code == 201, made.text
        return str(made.json()[0]["id"])

    def get(self, path: str, token: str, **params: Any) -> Any:
        return self.client.get(path, params=params, headers=self.headers(token))

    def register_node(self, gpus: int) -> None:
        node = {
            "name": "n0",
            "address": "127.0.0.1",
            "cpu_millis": 4000,
            "memory_mib": 4096,
            "gpu_indices": list(range(gpus)),
            "port_low": 20000,
            "port_high": 21000,
        }
        agent = self.headers((self.home / "agent.token").read_text().strip())
        agent[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        response = self.client.post(
            "/api/v1/agent/report", json={"agent_id": "a", "nodes": [node]}, headers=agent
        )
        assert response.status_code == 200, response.text


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx)) as client:
        yield Server(client, ctx, home, (home / "admin.token").read_text().strip())


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s}s")
        time.sleep(0.02)


def test_an_admin_reaches_any_users_job_by_name(server: Server) -> None:
    alice = server.user("alice")
    job_id = server.submit(alice, "train")
    for path in ("train", "train/events", "train/pending-reason", "alice~train"):
        response = server.get(f"/api/v1/jobs/{path}", server.admin)
        assert response.status_code == 200, (path, response.text)
    assert server.get("/api/v1/jobs/train", server.admin).json()["id"] == job_id
    stopped = server.client.post("/api/v1/jobs/train/stop", headers=server.as_admin)
    assert stopped.status_code == 202 and stopped.json()["id"] == job_id


def test_user_tilde_name_works_for_the_owner_and_no_one_else(server: Server) -> None:
    alice, bob = server.user("alice"), server.user("bob")
    job_id = server.submit(alice, "train")
    assert server.get("/api/v1/jobs/alice~train", alice).json()["id"] == job_id
    assert server.get("/api/v1/jobs/alice~train/events", alice).status_code == 200
    for path in ("alice~train", "alice~train/events", "alice~train/logs"):
        assert server.get(f"/api/v1/jobs/{path}", bob).status_code == 403, path
    assert server.get("/api/v1/jobs/train", bob).status_code == 404  # bob has no job "train"
    assert server.get("/api/v1/jobs/alice~nope", alice).status_code == 404


def test_another_users_job_is_refused_naming_its_owner_not_called_missing(
    server: Server,
) -> None:
    alice, bob = server.user("alice"), server.user("bob")
    job_id = server.submit(alice, "train")
    listed = server.get("/api/v1/jobs", bob, allUsers="true").json()
    assert [(j["id"], j["user"]) for j in listed] == [(job_id, "alice")]  # bob sees it here
    for path in (job_id, f"{job_id}/pending-reason", f"{job_id}/source", "alice~train/events"):
        refused = server.get(f"/api/v1/jobs/{path}", bob)
        assert refused.status_code == 403, (path, refused.text)
        body = refused.json()
        assert body["code"] == "ForbiddenUserError"
        assert body["message"] == (
            f"job {job_id} (alice~train) belongs to alice, not to you (bob): only its owner and "
            "admins can see its details, logs and events or stop it"
        )
    stop = server.client.post(f"/api/v1/jobs/{job_id}/stop", headers=server.headers(bob))
    assert stop.status_code == 403 and "belongs to alice" in stop.json()["message"]
    assert server.get(f"/api/v1/jobs/{job_id}", alice).json()["state"] == "WAITING"


def test_a_name_several_users_share_is_a_409_with_the_choices(server: Server) -> None:
    alice, bob = server.user("alice"), server.user("bob")
    server.submit(alice, "same")
    bobs = server.submit(bob, "same")
    ambiguous = server.get("/api/v1/jobs/same", server.admin)
    assert ambiguous.status_code == 409
    body = ambiguous.json()
    assert body["code"] == "AmbiguousJobName"
    assert "alice~same, bob~same" in body["message"]
    assert server.get("/api/v1/jobs/bob~same", server.admin).json()["id"] == bobs
    assert server.get("/api/v1/jobs/same", bob).json()["id"] == bobs  # one's own name: no doubt
    mine = server.submit(server.admin, "same")
    assert server.get("/api/v1/jobs/same", server.admin).json()["id"] == mine


def test_everyones_queue_is_visible_as_summaries(server: Server) -> None:
    alice, bob = server.user("alice"), server.user("bob")
    server.submit(alice, "a1")
    server.submit(bob, "b1")
    assert [j["name"] for j in server.get("/api/v1/jobs", bob).json()] == ["b1"]
    for params in ({"allUsers": "true"}, {"user": "all"}):
        listed = server.get("/api/v1/jobs", bob, **params).json()
        assert [(j["user"], j["name"]) for j in listed] == [("bob", "b1"), ("alice", "a1")]
        assert not any("roles" in j or "tasks" in j for j in listed)
    assert [j["name"] for j in server.get("/api/v1/jobs", bob, user="alice").json()] == ["a1"]


def test_bad_state_is_a_readable_422(server: Server) -> None:
    response = server.get("/api/v1/jobs", server.admin, state="TIMEOUT")
    assert response.status_code == 422
    assert response.json()["message"] == (
        "state: 'TIMEOUT' is not a job state; use one of "
        "WAITING, RUNNING, STOPPING, SUCCEEDED, FAILED, STOPPED"
    )


def test_since_keeps_jobs_submitted_at_or_after(server: Server) -> None:
    now = [1000.0]
    server.ctx.clock = lambda: now[0]
    server.submit(server.admin, "old")
    now[0] = 2000.0
    server.submit(server.admin, "new")
    names = [j["name"] for j in server.get("/api/v1/jobs", server.admin, since=1500).json()]
    assert names == ["new"]
    assert len(server.get("/api/v1/jobs", server.admin, since=999).json()) == 2


def test_events_come_in_time_order(server: Server) -> None:
    job_id = server.submit(server.admin, "e")
    with server.ctx.db.write() as session:  # an agent's report can carry an earlier time
        record(session, job_id, 50.0, "exited", "reported late, happened early")
        record(session, job_id, 40.0, "started", "earlier still")
    events = server.get(f"/api/v1/jobs/{job_id}/events", server.admin).json()
    stamps = [e["at"] for e in events]
    assert stamps == sorted(stamps)
    assert [e["kind"] for e in events[:2]] == ["started", "exited"]


def test_why_names_blockers_with_user_name_and_gpus(server: Server) -> None:
    server.register_node(gpus=2)
    alice, bob = server.user("alice"), server.user("bob")
    big = server.submit(alice, "big", gpu=2)
    wait_until(lambda: bool(server.get(f"/api/v1/jobs/{big}", alice).json()["tasks"]))
    waiting = server.submit(bob, "small", gpu=1)
    why = server.get(f"/api/v1/jobs/{waiting}/pending-reason", bob).json()
    assert why["blockers"] == [big]  # the old field stays
    assert why["blockerDetails"] == [
        {"id": big, "user": "alice", "name": "big", "virtualCluster": "default", "gpus": 2}
    ]
    assert server.get("/api/v1/jobs", alice).json()[0]["nodes"] == ["n0"]


def test_plan_uses_the_clusters_nodes_and_allocations_and_stores_nothing(
    server: Server,
) -> None:
    server.register_node(gpus=2)
    body = {"spec": JOB.format(name="p", gpu=1), "task": "w/0"}
    idle = server.client.post("/api/v1/jobs/plan", json=body, headers=server.as_admin)
    assert idle.status_code == 200, idle.text
    (planned,) = idle.json()
    assert planned["admitted"] is True and planned["nodes"] == 1
    assert [(p["node"], len(p["gpus"])) for p in planned["placements"]] == [("n0", 1)]
    assert planned["env"]["SHOAL_TASK_ROLE"] == "w"
    assert server.get("/api/v1/jobs", server.admin).json() == []
    held = server.submit(server.admin, "held", gpu=2)
    wait_until(lambda: bool(server.get(f"/api/v1/jobs/{held}", server.admin).json()["tasks"]))
    (busy,) = server.client.post("/api/v1/jobs/plan", json=body, headers=server.as_admin).json()
    assert busy["admitted"] is False
    assert busy["reason"]["code"] == "InsufficientGPU", busy
    assert [j["name"] for j in server.get("/api/v1/jobs", server.admin).json()] == ["held"]
    bad = server.client.post(
        "/api/v1/jobs/plan", json={**body, "task": "ghost/0"}, headers=server.as_admin
    )
    assert bad.status_code == 422 and "no role 'ghost'" in bad.json()["message"]
