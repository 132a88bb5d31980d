"""Attained-service aging as a VC setting: validated (4xx naming the field), stored, shown and
edited through the VC API; the service each job has had (every attempt, the running one until
now) and the scheduling priorities the snapshot takes from it, so that a running job demoted
below a waiting one is preempted for it, and goes back to the queue at its lower level. In
process: real SQLite and FastAPI, the agent's reports sent by hand, a clock the test sets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.core.plan import Plan
from shoal.core.scheduler import schedule
from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.services.accounting import job_accounts
from shoal.server.services.applier import apply_plan
from shoal.server.services.attained import (
    AgingTracker,
    attained_gpu_seconds,
    scheduling_priorities,
)
from shoal.server.services.snapshot import load_snapshot
from shoal.server.services.vcs import load_aging
from shoal.server.settings import ServerSettings
from shoal.store.models import Job
from tests.server.test_fencing import orders, report, running, task_row

VC = "/api/v1/virtual-clusters"
AGING = {"policy": "las", "thresholds_gpu_hours": [1.0, 10.0], "max_preemptions": None}
JOB = "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{cpu: 1, gpu: 2}}\n    command: x\n"
T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ctx(home: Path, clock: Clock) -> ServerContext:
    ctx = prepare(ServerSettings(home=home, node_timeout_s=10**9, kill_grace_s=10))
    ctx.clock = clock  # type: ignore[method-assign]
    return ctx


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        report(client, home, ["n0"])  # one node, 2 GPUs
        yield client


def create(api: TestClient, name: str, **settings: Any) -> Any:
    return api.post(f"{VC}/{name}", json={"guarantee_gpu": 2, **settings})


# ---- the setting ----


@pytest.mark.parametrize(
    ("aging", "path", "words"),
    [
        ({"thresholds_gpu_hours": [10, 1]}, "aging.thresholds_gpu_hours", "[1]: 1.0 must be"),
        ({"thresholds_gpu_hours": []}, "aging.thresholds_gpu_hours", "at least 1"),
        ({"thresholds_gpu_hours": list(range(1, 11))}, "aging.thresholds_gpu_hours", "at most 9"),
        ({"thresholds_gpu_hours": [0, 1]}, "aging.thresholds_gpu_hours", "[0]: 0.0 must be"),
        ({"thresholds_gpu_hours": ["x"]}, "aging.thresholds_gpu_hours.0", "number"),
        ({"policy": "fifo", "thresholds_gpu_hours": [1]}, "aging.policy", "'las'"),
        ({"thresholds_gpu_hours": [1], "levels": 3}, "aging.levels", "not permitted"),
        ({"policy": "las"}, "aging.thresholds_gpu_hours", "required"),
        (
            {"thresholds_gpu_hours": [1], "max_preemptions": 0},
            "aging.max_preemptions",
            "equal to 1",
        ),
    ],
)
def test_a_bad_aging_setting_is_refused_naming_the_field(
    api: TestClient, aging: dict[str, Any], path: str, words: str
) -> None:
    for answer in (
        create(api, "team", aging=aging),
        api.patch(f"{VC}/default", json={"aging": aging}),
    ):
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert body["code"] == "InvalidParametersError"
        paths = [p["path"] for p in body["problems"]]
        assert f"body.{path}" in paths, body
        assert words in body["message"], body["message"]
    assert api.get(f"{VC}/team").status_code == 404  # nothing half-written
    assert api.get(f"{VC}/default").json()["aging"] is None


def test_aging_is_created_shown_edited_and_switched_off(api: TestClient) -> None:
    assert create(api, "team", aging={"thresholds_gpu_hours": [1, 10]}).status_code == 201
    shown = api.get(f"{VC}/team").json()
    assert shown["aging"] == AGING and shown["guarantee"]["gpu"] == 2
    changed = api.patch(f"{VC}/team", json={"aging": {"thresholds_gpu_hours": [2.5]}}).json()
    assert [c["field"] for c in changed["changes"]] == ["aging"]
    assert changed["before"]["aging"] == AGING
    assert changed["after"]["aging"] == {
        "policy": "las",
        "thresholds_gpu_hours": [2.5],
        "max_preemptions": None,
    }
    assert api.get(f"{VC}/team").json()["aging"]["thresholds_gpu_hours"] == [2.5]
    # other edits leave it alone; null switches it off
    api.patch(f"{VC}/team", json={"strict_fifo": True})
    assert api.get(f"{VC}/team").json()["aging"]["thresholds_gpu_hours"] == [2.5]
    off = api.patch(f"{VC}/team", json={"aging": None}).json()
    assert off["after"]["aging"] is None and api.get(f"{VC}/team").json()["aging"] is None
    # the default VC may age its jobs too
    assert api.patch(f"{VC}/default", json={"aging": AGING}).status_code == 200
    assert api.get(f"{VC}/default").json()["aging"] == AGING


# ---- attained service and the scheduling priority ----


def submit(api: TestClient, name: str, vc: str = "team") -> str:
    made = api.post("/api/v1/jobs", json={"spec": JOB.format(name=name), "virtual_cluster": vc})
    assert made.status_code == 201, made.text
    return str(made.json()[0]["id"])


def aged_cycle(ctx: ServerContext) -> Plan:
    """One cycle as the server runs it once its snapshot takes the scheduling priorities (the
    two ``scheduling_priorities`` lines the snapshot adds)."""
    now = ctx.clock()
    with ctx.db.read() as session:
        aged, versions = load_snapshot(ctx, session)  # applies scheduling_priorities itself
    plan = schedule(aged, now)
    apply_plan(ctx, plan, versions)
    return plan


def start(api: TestClient, home: Path, ctx: ServerContext, job_id: str) -> str:
    (launch,) = orders(api, home, ["n0"])["launch"]
    attempt = launch["attempt_id"]
    report(api, home, ["n0"], running=[{**running(attempt, 0), "started_at": ctx.clock()}])
    assert task_row(ctx, job_id)[2] == "RUNNING"
    return str(attempt)


def test_a_job_past_a_threshold_is_demoted_preempted_and_requeued_at_its_level(
    api: TestClient, home: Path, ctx: ServerContext, clock: Clock
) -> None:
    settings = {"aging": {"thresholds_gpu_hours": [1, 10]}, "preempt_within": True}
    assert create(api, "team", **settings).status_code == 201
    long = submit(api, "long")
    assert [a.job_id for a in aged_cycle(ctx).admissions] == [long]
    first = start(api, home, ctx, long)

    clock.now += 1200  # 2 GPUs x 20 min: 0.67 GPU-hours, still at the top level
    short = submit(api, "short")
    plan = aged_cycle(ctx)
    assert not plan.admissions and not plan.preemptions
    with ctx.db.read() as session:
        assert attained_gpu_seconds(session, clock.now) == {long: 2400.0}
        ages = scheduling_priorities(session, clock.now)
    assert ages.of(long, "team", 10) == 10 and ages.of(short, "team", 10) == 10

    clock.now += 600  # 2 GPUs x 30 min: 1 GPU-hour; demoted below the waiting job
    with ctx.db.read() as session:
        ages = scheduling_priorities(session, clock.now)
        snapshot, _ = load_snapshot(ctx, session)
    assert {(a.job_id, a.priority) for a in snapshot.allocations} == {(long, 9)}
    assert ages.request(next(j for j in snapshot.queue if j.job_id == short)).priority == 10
    plan = aged_cycle(ctx)
    assert [(p.victim_job_id, p.for_job_id) for p in plan.preemptions] == [(long, short)]

    clock.now += 5  # it stops; back in the queue with the service it had, at its level
    exit_body = {"attempt_id": first, "exit_code": 143, "finished_at": clock.now, "epoch": 0}
    report(api, home, ["n0"], exited=[exit_body])
    with ctx.db.read() as session:
        state = session.get(Job, long)
        assert state is not None and state.state == "WAITING"
        served = attained_gpu_seconds(session, clock.now)
        accounted = job_accounts(session, [state], clock.now)[long].gpuHours
        assert served == {long: 2 * 1805.0}
        assert accounted == pytest.approx(served[long] / 3600, abs=1e-6)  # the same GPU time
        assert scheduling_priorities(session, clock.now).of(long, "team", 10) == 9
    # preempted once: with max_preemptions 1 it waits at its level, and runs at its own
    capped = {"aging": {"thresholds_gpu_hours": [1, 10], "max_preemptions": 1}}
    assert api.patch(f"{VC}/team", json=capped).status_code == 200
    with ctx.db.read() as session:
        ages = scheduling_priorities(session, clock.now)
    assert ages.of(long, "team", 10) == 9 and ages.of(long, "team", 10, running=True) == 10
    assert [a.job_id for a in aged_cycle(ctx).admissions] == [short]


def test_without_aging_nothing_changes_and_nothing_is_preempted(
    api: TestClient, home: Path, ctx: ServerContext, clock: Clock
) -> None:
    assert create(api, "team", preempt_within=True).status_code == 201
    long = submit(api, "long")
    aged_cycle(ctx)
    start(api, home, ctx, long)
    clock.now += 10 * 3600
    submit(api, "short")
    with ctx.db.read() as session:
        ages = scheduling_priorities(session, clock.now)
    assert not ages.aging and not ages.served  # no aging VC: not even a query of the tasks
    plan = aged_cycle(ctx)
    assert not plan.preemptions and not plan.admissions


def test_the_tracker_reprices_only_jobs_that_crossed_a_threshold_like_a_full_read(
    api: TestClient, home: Path, ctx: ServerContext, clock: Clock
) -> None:
    """The incremental tracker an in-memory scheduler model keeps: a running job is reported
    once when its service reaches a threshold (2 GPUs, 1 GPU-hour: 30 min after its start), and
    its priorities always equal the per-cycle read from the store."""
    assert create(api, "team", aging={"thresholds_gpu_hours": [1, 2]}).status_code == 201
    job = submit(api, "job")
    aged_cycle(ctx)
    attempt = start(api, home, ctx, job)
    tracker = AgingTracker()
    with ctx.db.read() as session:
        assert tracker.configure(load_aging(session)) is True
        tracker.reload(session, {job: "team"}, clock.now)
        snapshot, _ = load_snapshot(ctx, session)
    (held,) = snapshot.allocations

    def agrees() -> int:
        with ctx.db.read() as session:
            expected = scheduling_priorities(session, clock.now).of(job, "team", 10)
        assert tracker.priority(job, "team", 10, clock.now) == expected
        return expected

    assert tracker.allocation(held, clock.now) is held and agrees() == 10
    clock.now += 1799
    assert tracker.crossed(clock.now) == [] and agrees() == 10
    clock.now += 1
    assert tracker.crossed(clock.now) == [job]
    held = tracker.allocation(held, clock.now)  # the model keeps the aged object
    assert held.priority == 9 == agrees()
    assert tracker.crossed(clock.now + 1) == []  # reported once per threshold
    clock.now += 1800
    assert tracker.crossed(clock.now) == [job] and agrees() == 8
    assert tracker.allocation(held, clock.now).priority == 8  # from its own 10, not from 9
    clock.now += 10**6
    assert tracker.crossed(clock.now) == []  # at the bottom: nothing more to tell

    # it ends: reloaded, it is forgotten (only active jobs are kept)
    report(api, home, ["n0"], exited=[{"attempt_id": attempt, "exit_code": 0, "epoch": 0,
                                       "finished_at": T0 + 3000.0}])  # fmt: skip
    with ctx.db.read() as session:
        tracker.reload(session, {job: "team"}, clock.now)
        assert attained_gpu_seconds(session, clock.now) == {}  # not active
    assert tracker.priority(job, "team", 10, clock.now) == 10
    assert not tracker._served and tracker.crossed(clock.now + 10**7) == []
    with ctx.db.read() as session:
        assert tracker.configure(load_aging(session)) is False
    api.patch(f"{VC}/team", json={"aging": None})
    with ctx.db.read() as session:
        assert tracker.configure(load_aging(session)) is True
    assert tracker.aging == {}


def test_the_live_loop_demotes_and_preempts_through_its_model(
    api: TestClient, home: Path, ctx: ServerContext, clock: Clock
) -> None:
    """The same story through ``run_cycle``: the scheduler's in-memory model prices jobs with its
    ``AgingTracker`` and reprices a running job when its service crosses a threshold, with no
    write to the store in between."""
    settings = {"aging": {"thresholds_gpu_hours": [1, 10]}, "preempt_within": True}
    assert create(api, "team", **settings).status_code == 201
    long = submit(api, "long")
    assert run_cycle(ctx) == 1
    start(api, home, ctx, long)
    clock.now += 1200
    short = submit(api, "short")
    assert run_cycle(ctx) == 0  # no preemption yet: both at the top level
    with ctx.db.read() as session:
        assert session.get(Job, long).completing is None  # type: ignore[union-attr]
    clock.now += 600  # the threshold is crossed now; nothing was written to the store
    run_cycle(ctx)
    with ctx.db.read() as session:
        victim = session.get(Job, long)
        assert victim is not None and victim.completing == "preempted"
        assert victim.preempted_by == short
