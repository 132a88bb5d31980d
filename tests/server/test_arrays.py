"""Job arrays through the REST API, with a fake agent (real SQLite, the real app and its
scheduler loop): the cap holds elements back and lets the next go as one ends, the parent is
listed once and follows its elements, a stop ends them all, and a bad ``array`` stores nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings

JOB = (
    "version: 1\nname: sweep\nroles:\n  w:\n    resources: {cpu: 1, memory: 64}\n"
    "    command: 'true'\n"
)
NODE = {
    "name": "n0",
    "address": "127.0.0.1",
    "cpu_millis": 4000,  # room for 4 elements at once: the cap is what holds them back
    "memory_mib": 4096,
    "gpu_indices": [],
    "port_low": 20000,
    "port_high": 20100,
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home, scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        yield client


class FakeAgent:
    """Takes launch orders and reports exits, as an agent would, through the agent API."""

    def __init__(self, api: TestClient, home: Path) -> None:
        self.api = api
        token = (home / "agent.token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
        self.known: dict[str, dict[str, Any]] = {}  # attempt id -> launch order
        self.report()

    def report(self, exited: list[dict[str, Any]] | None = None) -> None:
        body = {"agent_id": "a", "nodes": [NODE], "exited": exited or []}
        response = self.api.post("/api/v1/agent/report", json=body, headers=self.headers)
        assert response.status_code == 200, response.text

    def orders(self, wait_s: float = 0.0) -> dict[str, Any]:
        body = {"agent_id": "a", "nodes": ["n0"], "known": list(self.known), "wait_s": wait_s}
        answer = self.api.post("/api/v1/agent/orders", json=body, headers=self.headers).json()
        for order in answer["launch"]:
            self.known[order["attempt_id"]] = order
        return dict(answer)

    def launches(self, count: int) -> list[dict[str, Any]]:
        """Wait for ``count`` new launch orders (and check no more come with them)."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            got += self.orders(wait_s=0.5)["launch"]
        assert len(got) == count, [o["job_id"] for o in got]
        return got

    def exit(self, order: dict[str, Any], code: int | None = 0, stopped: bool = False) -> None:
        now = time.time()
        ended = {
            "attempt_id": order["attempt_id"],
            "exit_code": code,
            "signal": 15 if stopped else None,
            "stop_requested": stopped,
            "started_at": now,
            "finished_at": now,
        }
        self.report([ended])


def _submit(api: TestClient, array: str, spec: str = JOB) -> dict[str, Any]:
    response = api.post("/api/v1/jobs", json={"spec": spec, "array": array})
    assert response.status_code == 201, response.text
    (job,) = response.json()
    return dict(job)


def _wait_state(api: TestClient, ref: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        detail = dict(api.get(f"/api/v1/jobs/{ref}").json())
        if detail["state"] == state:
            return detail
        time.sleep(0.02)
    raise AssertionError(f"job {ref} is {detail['state']}, not {state}")


def test_the_cap_holds_elements_back_and_releases_them_in_order(
    api: TestClient, home: Path
) -> None:
    agent = FakeAgent(api, home)
    job = _submit(api, "0-5%2")
    assert job["array"] == {
        "expression": "0-5%2",
        "size": 6,
        "cap": 2,
        "counts": {"WAITING": 6},
        "held": 4,
    }
    first = agent.launches(2)
    assert [o["job_id"] for o in first] == [f"{job['id']}_0", f"{job['id']}_1"]
    env = first[1]["env"]
    assert env["SHOAL_ARRAY_INDEX"] == env["SLURM_ARRAY_TASK_ID"] == "1"
    assert env["SHOAL_ARRAY_JOB_ID"] == env["SLURM_ARRAY_JOB_ID"] == job["id"]
    assert env["SLURM_ARRAY_TASK_COUNT"] == "6" and env["SLURM_ARRAY_TASK_MAX"] == "5"
    assert env["SHOAL_JOB_ID"] == f"{job['id']}_1"
    detail = _wait_state(api, job["id"], "RUNNING")
    held = [e for e in detail["elements"] if e["pending"]]
    assert [e["index"] for e in held] == [2, 3, 4, 5]
    assert held[0]["pending"]["code"] == "ArrayConcurrencyLimit"
    assert "at most 2 elements at once" in held[0]["pending"]["message"]
    assert agent.orders()["launch"] == []  # the node has room for 2 more: the cap says no
    under_way = list(first)
    for expected in (2, 3, 4, 5):  # one ends, the next held one (by index) goes
        agent.exit(under_way.pop(0))
        (order,) = agent.launches(1)
        assert order["job_id"] == f"{job['id']}_{expected}"
        under_way.append(order)
    for order in under_way:
        agent.exit(order)
    final = _wait_state(api, job["id"], "SUCCEEDED")
    assert final["exitCode"] == 0 and final["completedAt"] is not None
    assert final["array"]["counts"] == {"SUCCEEDED": 6}
    assert final["diagnostics"] == "every element succeeded; 6 elements: 6 succeeded"


def test_an_array_is_listed_once_and_found_by_its_name(api: TestClient, home: Path) -> None:
    FakeAgent(api, home)
    job = _submit(api, "1,3,5-9%3")
    listed = api.get("/api/v1/jobs").json()
    assert [j["id"] for j in listed] == [job["id"]]
    assert listed[0]["array"]["size"] == 7 and listed[0]["taskCount"] == 7
    assert api.get("/api/v1/jobs/sweep").json()["id"] == job["id"]  # the parent, not an element
    element = api.get(f"/api/v1/jobs/{job['id']}_5").json()
    assert (element["arrayJobId"], element["arrayIndex"]) == (job["id"], 5)
    assert api.get(f"/api/v1/jobs/{job['id']}_2").status_code == 404  # no index 2
    clash = api.post("/api/v1/jobs", json={"spec": JOB})
    assert clash.status_code == 409 and clash.json()["code"] == "ConflictJobError"
    after = api.post("/api/v1/jobs", json={"spec": JOB, "name": "other"}).json()
    assert after[0]["id"] == str(int(job["id"]) + 1)  # elements take no job ids
    why = api.get(f"/api/v1/jobs/{job['id']}_9/pending-reason").json()
    assert why["code"] == "ArrayConcurrencyLimit" and why["blockers"] == []
    for logs in (f"/api/v1/jobs/{job['id']}/logs", f"/api/v1/jobs/{job['id']}/logs/lines"):
        refused = api.get(logs)
        assert refused.status_code == 400 and refused.json()["code"] == "ArrayParentHasNoLogs"
        assert f"shoal job logs {job['id']}_1" in refused.json()["message"]


def test_stopping_the_parent_stops_every_element(api: TestClient, home: Path) -> None:
    agent = FakeAgent(api, home)
    job = _submit(api, "0-9%3")
    running = agent.launches(3)
    stopped = api.post(f"/api/v1/jobs/{job['id']}/stop")
    assert stopped.status_code == 202
    body = stopped.json()
    assert body["state"] == "STOPPING"
    assert body["array"]["counts"] == {"STOPPING": 3, "STOPPED": 7}
    kill = agent.orders()["kill"]
    assert sorted(kill) == sorted(o["attempt_id"] for o in running)
    for order in running:
        agent.exit(order, code=None, stopped=True)
    final = _wait_state(api, job["id"], "STOPPED")
    assert final["array"]["counts"] == {"STOPPED": 10}
    assert final["diagnostics"].startswith("stopped by admin; 10 elements: 10 stopped")
    assert agent.orders()["launch"] == []  # nothing held was released by the stop


def test_the_parent_fails_with_its_first_failed_element(api: TestClient, home: Path) -> None:
    agent = FakeAgent(api, home)
    job = _submit(api, "0-2")
    orders = agent.launches(3)
    agent.exit(orders[0])
    agent.exit(orders[2], code=3)
    agent.exit(orders[1], code=0)
    final = _wait_state(api, job["id"], "FAILED")
    assert final["exitCode"] == 3 and final["exitClass"] == "USER_FAILURE"
    assert final["diagnostics"].startswith(
        f"1 of 3 elements failed (first: element 2 (job {job['id']}_2)"
    )


def test_an_element_stopped_alone_lets_the_next_one_go(api: TestClient, home: Path) -> None:
    agent = FakeAgent(api, home)
    job = _submit(api, "0-3%1")
    (first,) = agent.launches(1)
    api.post(f"/api/v1/jobs/{job['id']}_2/stop")  # a held one: ends at once, releases nothing
    assert agent.orders()["launch"] == []
    api.post(f"/api/v1/jobs/{job['id']}_0/stop")
    agent.exit(first, code=None, stopped=True)
    (second,) = agent.launches(1)
    assert second["job_id"] == f"{job['id']}_1"
    agent.exit(second)
    (third,) = agent.launches(1)
    assert third["job_id"] == f"{job['id']}_3"
    agent.exit(third)
    final = _wait_state(api, job["id"], "STOPPED")  # two were stopped on their own
    assert final["diagnostics"].startswith("2 of 4 elements were stopped")


@pytest.mark.parametrize(
    ("array", "said"),
    [
        ("0-", "'0-' is not an index"),
        ("9-5", "runs backwards; write 5-9"),
        ("0-9%0", "must be at least 1"),
        ("0-20000", "has 20,001 elements; an array has at most 10,000"),
        ("", "is empty"),
    ],
)
def test_a_bad_array_is_a_400_that_stores_nothing(api: TestClient, array: str, said: str) -> None:
    response = api.post("/api/v1/jobs", json={"spec": JOB, "array": array})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "InvalidArray" and said in body["message"]
    assert body["message"].startswith(f"array {array!r}: ")
    assert api.get("/api/v1/jobs?state=WAITING").json() == []
    assert api.get("/api/v1/cluster").json()["jobs"]["WAITING"] == 0


def test_an_array_too_many_tasks_is_refused(api: TestClient) -> None:
    wide = JOB.replace("  w:\n", "  w:\n    instances: 20\n")
    response = api.post("/api/v1/jobs", json={"spec": wide, "array": "0-9999"})
    assert response.status_code == 400
    assert "200,000 tasks; at most 100,000 per array" in response.json()["message"]


def test_the_job_file_may_carry_the_array_and_the_request_overrides_it(
    api: TestClient, home: Path
) -> None:
    FakeAgent(api, home)
    in_file = JOB.replace("name: sweep\n", "name: sweep\narray: 0-3%2\n")
    (job,) = api.post("/api/v1/jobs", json={"spec": in_file}).json()
    assert job["array"]["expression"] == "0-3%2"
    (other,) = api.post(
        "/api/v1/jobs", json={"spec": in_file, "name": "again", "array": "0-1"}
    ).json()
    assert other["array"]["expression"] == "0-1" and other["array"]["cap"] is None
