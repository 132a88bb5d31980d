"""The metrics and overview routes (routers/metrics.py) against a real app on SQLite: agents'
reports recorded at the server's (here, a test's) clock, series as columns, the overview's
counts and VC sharing, the tasks on a node as the API shows other users' jobs, a removed node
forgotten, every route for signed-in users only."""

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
from shoal.server.settings import ServerSettings

JOB = (
    "version: 1\nname: {name}\nvc: {vc}\nroles:\n  w:\n"
    "    resources: {{gpu: {gpu}, cpu: 1}}\n    command: echo {name}\n"
)


class Clock:
    """The server's clock, moved by the test (from a whole minute of the real time)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) // 60 * 60)

    def __call__(self) -> float:
        return self.now


@dataclass
class Server:
    client: TestClient
    ctx: ServerContext
    home: Path
    admin: str
    clock: Clock

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def user(self, name: str) -> str:
        made = self.client.post(
            "/api/v1/users", json={"name": name}, headers=self.headers(self.admin)
        )
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    def get(self, path: str, token: str | None = None, **params: Any) -> Any:
        response = self.client.get(path, params=params, headers=self.headers(token or self.admin))
        assert response.status_code == 200, response.text
        return response.json()

    def submit(self, token: str, name: str, gpu: int = 0, vc: str = "default") -> str:
        made = self.client.post(
            "/api/v1/jobs",
            json={"spec": JOB.format(name=name, gpu=gpu, vc=vc)},
            headers=self.headers(token),
        )
        assert made.status_code == 201, made.text
        return str(made.json()[0]["id"])

    def report(self, name: str, gpus: int = 2, metrics: dict[str, Any] | None = None) -> None:
        node: dict[str, Any] = {
            "name": name,
            "address": "127.0.0.1",
            "cpu_millis": 4000,
            "memory_mib": 4096,
            "gpu_indices": list(range(gpus)),
            "port_low": 20000,
            "port_high": 21000,
        }
        if metrics is not None:
            node["metrics"] = metrics
        agent = self.headers((self.home / "agent.token").read_text().strip())
        agent[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        body = {"agent_id": f"agent-{name}", "nodes": [node]}
        response = self.client.post("/api/v1/agent/report", json=body, headers=agent)
        assert response.status_code == 200, response.text


def figures(cpu_millis: float, gpus: list[float] | None = None) -> dict[str, Any]:
    return {
        "tasks_cpu_millis": cpu_millis,
        "tasks_memory_mib": 256.0,
        "host_cpu_pct": 12.5,
        "host_memory_used_mib": 1024.0,
        "host_memory_total_mib": 4096.0,
        "gpus": [
            {"index": i, "utilization_pct": u, "memory_used_mib": 100.0, "memory_total_mib": 800.0}
            for i, u in enumerate(gpus or [])
        ],
    }


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, scheduler="thread"))  # on the test's clock too
    clock = ctx.clock = Clock()
    with TestClient(create_app(ctx)) as client:
        yield Server(client, ctx, home, (home / "admin.token").read_text().strip(), clock)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s}s")
        time.sleep(0.02)


def test_reports_become_cluster_and_node_series(server: Server) -> None:
    start = server.clock.now
    server.report("n0", metrics=figures(500, gpus=[50.0, 30.0]))
    server.report("n1", gpus=0, metrics=figures(1500))
    server.clock.now += 4
    server.report("n0", metrics=figures(1500, gpus=[50.0, 30.0]))
    server.clock.now += 6  # a new bucket: the first one is closed into the cluster's
    server.report("n1", gpus=0, metrics=figures(0))
    cluster = server.get("/api/v1/metrics/cluster", since=start)
    assert cluster["t"] == [start, start + 10] and cluster["step"] == 10
    assert cluster["until"] == start + 10
    series = cluster["series"]
    assert series["cpuUsed"] == [2.5, None]  # n0's mean 1 core + n1's 1.5; the open bucket: none
    assert series["cpuCapacity"] == [8.0, None] and series["gpuCapacity"] == [2.0, None]
    assert series["cpuAllocated"] == [0.0, None]
    assert series["gpuUsed"] == [0.8, None]  # only n0 has NVML figures
    assert series["memoryUsedMiB"] == [512.0, None]
    node = server.get("/api/v1/nodes/n0/metrics", since=-10)
    assert node["node"] == "n0" and node["t"] == [start, start + 10]
    assert node["series"]["cpuUsed"] == [1.0, None]
    assert node["series"]["hostCpuPercent"] == [12.5, None]
    assert [g["index"] for g in node["gpus"]] == [0, 1]
    assert node["gpus"][1]["series"]["utilizationPercent"] == [30.0, None]
    simulated = server.get("/api/v1/nodes/n1/metrics", since=-10)
    assert simulated["gpus"] == [] and simulated["series"]["gpuUsed"] == [None, None]
    assert simulated["series"]["cpuUsed"] == [1.5, 0.0]  # a node's own bucket shows as it fills
    hourly = server.get("/api/v1/metrics/cluster", step=3600)
    assert hourly["step"] == 3600 and len(hourly["t"]) in (1, 2)


def test_an_agent_that_sends_no_metrics_still_counts_in_capacity(server: Server) -> None:
    start = server.clock.now
    server.report("old")  # an older agent: no ``metrics`` in its report
    server.clock.now += 10
    server.report("old")
    series = server.get("/api/v1/metrics/cluster", since=start)["series"]
    assert series["cpuCapacity"] == [4.0, None] and series["cpuUsed"] == [None, None]
    assert server.get("/api/v1/overview")["used"]["cpu"] is None


def test_the_overview_counts_nodes_jobs_reservations_and_use(server: Server) -> None:
    server.report("n0", metrics=figures(2000))
    server.report("n1", metrics=figures(1000))
    server.client.post("/api/v1/nodes/n1/cordon", headers=server.headers(server.admin))
    alice = server.user("alice")
    server.submit(alice, "small", gpu=1)
    server.submit(alice, "waits", gpu=2)  # n0 has 1 GPU left, n1 is cordoned
    wait_until(lambda: server.get("/api/v1/overview")["allocated"]["gpu"] == 1.0)
    overview = server.get("/api/v1/overview", alice)
    assert overview["at"] == server.clock.now
    assert overview["nodes"] == {
        "total": 2,
        "byState": {"READY": 1, "NOT_READY": 0, "CORDONED": 1, "DRAINING": 0, "DRAINED": 0},
    }
    assert overview["capacity"] == {"cpu": 8.0, "memoryMiB": 8192.0, "gpu": 4.0}
    assert overview["allocated"] == {"cpu": 1.0, "memoryMiB": 1024.0, "gpu": 1.0}
    assert overview["used"]["cpu"] == 3.0 and overview["used"]["memoryMiB"] == 512.0
    assert overview["used"]["gpu"] is None  # no NVML figures
    assert (overview["jobs"]["RUNNING"], overview["jobs"]["WAITING"]) == (1, 1)
    assert set(overview["jobs"]) == {
        "WAITING",
        "RUNNING",
        "STOPPING",
        "SUCCEEDED",
        "FAILED",
        "STOPPED",
    }
    (default,) = overview["virtualClusters"]
    assert default["name"] == "default" and default["members"] == ["*"]
    assert default["used"]["gpu"] == 1.0
    assert (default["runningJobs"], default["waitingJobs"]) == (1, 1)


def test_each_vc_shows_what_it_borrows_and_lends(server: Server) -> None:
    server.report("n0", gpus=4)
    admin = server.headers(server.admin)
    made = server.client.post(
        "/api/v1/virtual-clusters/team", json={"guarantee_gpu": 1}, headers=admin
    )
    assert made.status_code == 201, made.text
    server.submit(server.admin, "big", gpu=3, vc="team")
    server.submit(server.admin, "more", gpu=2, vc="team")  # over what is idle: waits
    wait_until(lambda: server.get("/api/v1/overview")["allocated"]["gpu"] == 3.0)
    vcs = {vc["name"]: vc for vc in server.get("/api/v1/overview")["virtualClusters"]}
    assert vcs["team"]["guarantee"]["gpu"] == 1.0 and vcs["team"]["guarantee"]["cpu"] is None
    assert vcs["team"]["borrowed"] == {"cpu": 0.0, "memoryMiB": 0.0, "gpu": 2.0}
    assert vcs["team"]["lent"]["gpu"] == 0.0
    assert vcs["default"]["guarantee"]["gpu"] == 3.0 and vcs["default"]["lent"]["gpu"] == 2.0
    assert (vcs["team"]["runningJobs"], vcs["team"]["waitingJobs"]) == (1, 1)
    assert (vcs["default"]["runningJobs"], vcs["default"]["waitingJobs"]) == (0, 0)


def test_the_tasks_on_a_node_hide_other_users_commands(server: Server) -> None:
    server.report("n0")
    alice, bob = server.user("alice"), server.user("bob")
    job_id = server.submit(alice, "mine", gpu=2)
    wait_until(lambda: len(server.get("/api/v1/nodes/n0/tasks")) == 1)
    (as_alice,) = server.get("/api/v1/nodes/n0/tasks", alice)
    assert as_alice["jobId"] == job_id and as_alice["jobName"] == "mine"
    assert (as_alice["role"], as_alice["index"], as_alice["user"]) == ("w", 0, "alice")
    assert as_alice["gpus"] == [0, 1] and as_alice["cpu"] == 1.0
    assert as_alice["state"] == "WAITING" and as_alice["startedAt"] is None
    assert as_alice["visible"] and as_alice["command"] == "echo mine"
    (as_bob,) = server.get("/api/v1/nodes/n0/tasks", bob)
    assert as_bob["jobId"] == job_id and as_bob["user"] == "alice"
    assert not as_bob["visible"] and as_bob["command"] is None and as_bob["pid"] is None
    assert server.get("/api/v1/nodes/n0/tasks")[0]["command"] == "echo mine"  # an admin


def test_a_removed_node_is_a_404_and_its_history_goes(server: Server) -> None:
    server.report("keep", metrics=figures(100))
    server.report("gone", metrics=figures(100))
    assert server.ctx.metrics.known() == ["gone", "keep"]
    removed = server.client.delete("/api/v1/nodes/gone", headers=server.headers(server.admin))
    assert removed.status_code == 200, removed.text
    for path in ("/api/v1/nodes/gone/metrics", "/api/v1/nodes/gone/tasks"):
        response = server.client.get(path, headers=server.headers(server.admin))
        assert response.status_code == 404 and response.json()["code"] == "NoNodeError"
    server.clock.now += 10  # the next bucket's first report reads the nodes again
    server.report("keep", metrics=figures(100))
    assert server.ctx.metrics.known() == ["keep"]


def test_the_routes_are_for_signed_in_users_and_check_their_parameters(server: Server) -> None:
    server.report("n0")
    for path in (
        "/api/v1/overview",
        "/api/v1/metrics/cluster",
        "/api/v1/nodes/n0/metrics",
        "/api/v1/nodes/n0/tasks",
    ):
        assert server.client.get(path).status_code == 401, path
        agent = server.headers((server.home / "agent.token").read_text().strip())
        assert server.client.get(path, headers=agent).status_code == 403, path
    bad = server.client.get(
        "/api/v1/metrics/cluster", params={"step": 0}, headers=server.headers(server.admin)
    )
    assert bad.status_code == 422 and "step" in bad.json()["message"]
