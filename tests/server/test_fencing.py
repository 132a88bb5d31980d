"""Fencing on the server, in process: node epochs (a report about an attempt launched under an
older epoch never changes a newer attempt and is answered with a kill), the lease in report answers
and its check at start, node clocks restarting with the server, and the applier's last look at the
nodes (a cordon or another placement between snapshot and apply drops the admission whole)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.agent.cache import NodeCache
from shoal.agent.runner import Runner
from shoal.core.nodestates import NodeEvent
from shoal.core.plan import Admission, Plan
from shoal.core.scheduler import schedule
from shoal.server.app import create_app, prepare
from shoal.server.auth import Principal
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.services.agents import lose_silent_nodes, restart_node_clocks
from shoal.server.services.applier import apply_plan
from shoal.server.services.node_life import hold_node
from shoal.server.services.snapshot import load_snapshot
from shoal.server.settings import FencingError, ServerSettings
from shoal.store.models import Event, Job, Node, Task
from tests.server.test_api import agent_headers

ADMIN = Principal("admin", True, "user")
JOB = (
    "version: 1\nname: {name}\n{extra}roles:\n  w:\n{role}"
    "    resources: {{cpu: 1, gpu: {gpu}}}\n    command: sleep 1\n"
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home, node_timeout_s=30, kill_grace_s=10))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def node_body(name: str, gpus: int = 2) -> dict[str, Any]:
    return {
        "name": name,
        "address": "127.0.0.1",
        "cpu_millis": 4000,
        "memory_mib": 4096,
        "gpu_indices": list(range(gpus)),
        "port_low": 20000,
        "port_high": 21000,
    }


def report(
    api: TestClient,
    home: Path,
    nodes: list[str],
    running: list[dict[str, Any]] | None = None,
    exited: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    response = api.post(
        "/api/v1/agent/report",
        json={
            "agent_id": "a",
            "nodes": [node_body(n) for n in nodes],
            "running": running or [],
            "exited": exited or [],
        },
        headers=agent_headers(home),
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def orders(api: TestClient, home: Path, nodes: list[str]) -> dict[str, Any]:
    response = api.post(
        "/api/v1/agent/orders", json={"agent_id": "a", "nodes": nodes}, headers=agent_headers(home)
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def submit(api: TestClient, name: str, gpu: int = 0, extra: str = "", role: str = "") -> str:
    spec = JOB.format(name=name, gpu=gpu, extra=extra, role=role)
    made = api.post("/api/v1/jobs", json={"spec": spec})
    assert made.status_code == 201, made.text
    return str(made.json()[0]["id"])


def task_row(ctx: ServerContext, job_id: str) -> tuple[str, int, str, str]:
    """The job's task of its latest attempt."""
    with ctx.db.read() as session:
        task = session.scalars(
            select(Task).where(Task.job_id == job_id).order_by(Task.id.desc())
        ).first()
        assert task is not None
        return task.attempt_id, task.attempt, task.state, task.node


def running(attempt_id: str, epoch: int) -> dict[str, Any]:
    return {"attempt_id": attempt_id, "pid": 4242, "started_at": 1.0, "epoch": epoch}


def go_not_ready(ctx: ServerContext) -> None:
    now = ctx.clock
    ctx.clock = lambda: now() + ctx.settings.node_timeout_s + 1  # type: ignore[method-assign]
    assert lose_silent_nodes(ctx)
    ctx.clock = now  # type: ignore[method-assign]


def test_a_report_of_an_older_epoch_never_changes_the_newer_attempt(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    answer = report(api, home, ["n0"])
    assert answer["lease_s"] == ctx.settings.lease_s == 14.0
    job_id = submit(api, "epochs", extra="retries: 3\n")
    assert run_cycle(ctx) == 1
    (launch,) = orders(api, home, ["n0"])["launch"]
    assert launch["epoch"] == 0
    first = launch["attempt_id"]
    assert report(api, home, ["n0"], running=[running(first, 0)])["kill"] == []
    assert task_row(ctx, job_id)[2] == "RUNNING"

    go_not_ready(ctx)  # the node's tasks are lost; the job is placed again (its retries)
    with ctx.db.read() as session:
        assert session.get(Node, "n0").epoch == 1  # type: ignore[union-attr]
    answer = report(api, home, ["n0"], running=[running(first, 0)])  # the agent comes back
    assert answer["kill"] == [first]
    assert run_cycle(ctx) == 1  # n0 is READY again: the new attempt lands there
    (launch,) = orders(api, home, ["n0"])["launch"]
    second = launch["attempt_id"]
    assert second != first and launch["epoch"] == 1
    assert report(api, home, ["n0"], running=[running(second, 1)])["kill"] == []
    before = task_row(ctx, job_id)
    assert before[0] == second and before[2] == "RUNNING"

    # The old attempt's reports, late: a run, its exit, and even the new attempt's id under the
    # old epoch: none changes the newer attempt; the runs are answered with kills.
    stale_exit = {"attempt_id": first, "exit_code": 0, "finished_at": 2.0, "epoch": 0}
    answer = report(
        api, home, ["n0"], running=[running(second, 0), running(first, 0)], exited=[stale_exit]
    )
    assert sorted(answer["kill"]) == sorted([second, first])
    assert answer["acked"] == [first]
    spoofed_exit = {"attempt_id": second, "exit_code": 0, "finished_at": 2.0, "epoch": 0}
    answer = report(api, home, ["n0"], running=[running(second, 1)], exited=[spoofed_exit])
    assert answer["acked"] == [second] and answer["kill"] == []
    assert task_row(ctx, job_id) == before
    # its own exit, under its own epoch, is recorded
    own_exit = {"attempt_id": second, "exit_code": 0, "finished_at": 3.0, "epoch": 1}
    report(api, home, ["n0"], exited=[own_exit])
    assert task_row(ctx, job_id)[2] == "SUCCEEDED"


@pytest.mark.parametrize("job_retries", [0, 1])
def test_a_task_lost_with_its_node_is_not_retried_in_place_there(
    api: TestClient, home: Path, ctx: ServerContext, job_retries: int
) -> None:
    report(api, home, ["n0"])
    extra = f"retries: {job_retries}\n" if job_retries else ""
    job_id = submit(api, "lost", extra=extra, role="    retries: 3\n")  # in-place retries too
    run_cycle(ctx)
    (launch,) = orders(api, home, ["n0"])["launch"]
    report(api, home, ["n0"], running=[running(launch["attempt_id"], 0)])
    report(api, home, ["n1"])  # another node, heard from later
    now = ctx.clock
    ctx.clock = lambda: now() + ctx.settings.node_timeout_s + 1  # type: ignore[method-assign]
    with ctx.db.write() as session:  # n1 is heard from at that time; n0 is not
        n1 = session.get(Node, "n1")
        assert n1 is not None
        n1.last_seen = ctx.clock()
    assert lose_silent_nodes(ctx)
    ctx.clock = now  # type: ignore[method-assign]
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    events = [e["kind"] for e in api.get(f"/api/v1/jobs/{job_id}/events").json()]
    assert "retried" not in events, events  # never "will run again on n0"
    if not job_retries:
        assert job["state"] == "FAILED" and job["exitClass"] == "PLATFORM_FAILURE", job
        return
    assert job["state"] == "WAITING", job
    assert run_cycle(ctx) == 1
    assert task_row(ctx, job_id)[3] == "n1"  # placed again, on the node that is up


def test_a_fenced_exit_is_a_platform_failure_that_names_fencing(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, ["n0"])
    job_id = submit(api, "fenced")
    run_cycle(ctx)
    (launch,) = orders(api, home, ["n0"])["launch"]
    attempt = launch["attempt_id"]
    report(api, home, ["n0"], running=[running(attempt, 0)])
    fenced = {"attempt_id": attempt, "exit_code": None, "signal": 15, "fenced": True}
    report(api, home, ["n0"], exited=[{**fenced, "finished_at": 2.0}])
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["exitClass"] == "PLATFORM_FAILURE", job
    assert "fencing" in job["tasks"][0]["diagnostics"]


@pytest.mark.parametrize(("timeout", "grace", "ok"), [(30, 10, True), (8, 1, True), (6, 1, False)])
def test_the_fencing_inequality_is_checked_at_start(
    tmp_path: Path, timeout: float, grace: float, ok: bool
) -> None:
    settings = ServerSettings(home=tmp_path, node_timeout_s=timeout, kill_grace_s=grace)
    lease = settings.lease_s
    assert lease + grace + settings.heartbeat_write_s + 1.0 <= timeout
    if ok:
        settings.check_fencing()
        return
    with pytest.raises(FencingError) as refused:
        prepare(settings)
    message = str(refused.value)
    assert "--node-timeout 6s" in message and "--kill-grace 1s" in message
    assert "raise --node-timeout to 7s" in message
    assert not (tmp_path / "shoal.db").exists()  # nothing written


def test_server_start_gives_every_ready_node_a_full_timeout(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, ["n0"])
    with ctx.db.write() as session:
        session.get(Node, "n0").last_seen = 0.0  # type: ignore[union-attr]  # heard long ago
    assert restart_node_clocks(ctx) == 1
    assert not lose_silent_nodes(ctx)
    with ctx.db.read() as session:
        assert session.get(Node, "n0").state == "READY"  # type: ignore[union-attr]


def _plan(ctx: ServerContext) -> tuple[Any, dict[str, int]]:
    with ctx.db.read() as session:
        snapshot, versions = load_snapshot(ctx, session, queue_only=True)
    return schedule(snapshot, ctx.clock()), versions


def _events(ctx: ServerContext, job_id: str) -> list[str]:
    with ctx.db.read() as session:
        query = select(Event).where(Event.job_id == job_id, Event.kind == "replanned")
        return [e.message for e in session.scalars(query)]


def _state(ctx: ServerContext, job_id: str) -> str:
    with ctx.db.read() as session:
        return session.get(Job, job_id).state  # type: ignore[union-attr]


def test_the_applier_drops_an_admission_onto_a_node_cordoned_since_the_snapshot(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, ["n0"])
    job_id = submit(api, "raced")
    plan, versions = _plan(ctx)
    assert [a.job_id for a in plan.admissions] == [job_id]
    hold_node(ctx, ADMIN, "n0", NodeEvent.CORDON)  # between the two
    assert apply_plan(ctx, plan, versions) == 0
    assert _state(ctx, job_id) == "WAITING"
    with ctx.db.read() as session:
        assert session.scalars(select(Task).where(Task.job_id == job_id)).all() == []
    assert _events(ctx, job_id) == [
        "placement dropped before it was written: node n0 is CORDONED now: it takes no new "
        "task; the job stays queued"
    ]
    hold_node(ctx, ADMIN, "n0", NodeEvent.UNCORDON)
    assert run_cycle(ctx) == 1  # decided again on a fresh snapshot, it runs


def test_the_applier_drops_an_admission_whose_gpus_another_placement_took(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    report(api, home, ["n0"])  # 2 GPUs
    first = submit(api, "first", gpu=2)
    second = submit(api, "second", gpu=2)
    rival, versions = _plan(ctx)  # places "first" on both GPUs; "second" must wait
    assert [a.job_id for a in rival.admissions] == [first]
    # A plan made on the same snapshot by a planner that did not know of "first" would put
    # "second" on the same GPUs; the other placement is written first.
    (taken,) = rival.admissions
    stale = Plan(admissions=(Admission(second, taken.placements),))
    assert apply_plan(ctx, rival, versions) == 1
    assert _state(ctx, first) == "RUNNING"
    assert apply_plan(ctx, stale, versions) == 0
    assert _state(ctx, second) == "WAITING"
    (message,) = _events(ctx, second)
    assert "node n0 for w[0]" in message and "taken meanwhile" in message


def test_a_kill_before_launch_on_a_node_that_was_lost_once_ends_the_job(
    api: TestClient, home: Path, ctx: ServerContext, tmp_path: Path
) -> None:
    """The agent answers a kill of an attempt it never launched with an exit under no epoch; on a
    node whose epoch has risen, that exit must still end the attempt (the job would stay STOPPING
    and the agent's orders would return at once forever)."""
    report(api, home, ["n0"])
    go_not_ready(ctx)
    report(api, home, ["n0"])  # back, under epoch 1
    job_id = submit(api, "stopped-early")
    assert run_cycle(ctx) == 1
    assert api.post(f"/api/v1/jobs/{job_id}/stop").status_code == 202
    kills = orders(api, home, ["n0"])["kill"]
    assert kills
    runner = Runner(tmp_path / "agent", NodeCache(tmp_path / "agent" / "cache", _no_download))
    for attempt_id in kills:
        runner.kill(attempt_id)  # never launched here: the agent's own answer
    exits = [e.model_dump() for e in runner.exit_reports()]
    assert [e["epoch"] for e in exits] == [None]
    assert report(api, home, ["n0"], exited=exits)["acked"] == kills
    assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "STOPPED"
    assert orders(api, home, ["n0"])["kill"] == []


def _no_download(path: str, sink: object) -> None:
    raise AssertionError(f"nothing to download, yet {path} was asked for")
