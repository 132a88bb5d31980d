"""The scheduler's in-memory model (server/model.py): kept current by the store's change feed,
equal to a full load after submissions, admissions, exits, stops and node changes, and repaired
(with a log line) when it differs from the store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select, text, update

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import SchedulerState, run_cycle
from shoal.server.model import SchedulerModel
from shoal.server.positions import position_of
from shoal.server.settings import ServerSettings
from shoal.store.models import Job, SchedChange
from tests.server.test_fencing import report, submit


@pytest.fixture
def ctx(tmp_path: Path) -> ServerContext:
    return prepare(ServerSettings(home=tmp_path / "home"))


@pytest.fixture
def api(ctx: ServerContext) -> Iterator[TestClient]:
    token = (ctx.settings.home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def register(api: TestClient, ctx: ServerContext, *names: str) -> None:
    report(api, ctx.settings.home, list(names))


def full_load(ctx: ServerContext) -> SchedulerModel:
    model = SchedulerModel()
    with ctx.db.read() as session:
        model.load(ctx, session)
    return model


def state(ctx: ServerContext) -> SchedulerState:
    assert isinstance(ctx.scheduler_state, SchedulerState)
    return ctx.scheduler_state


def assert_model_is_the_store(ctx: ServerContext) -> None:
    model = state(ctx).model
    truth = full_load(ctx)
    assert model.nodes == truth.nodes
    assert model.versions == truth.versions
    assert model.queue == truth.queue
    assert {j: sorted(a) for j, a in model.allocations.items()} == {
        j: sorted(a) for j, a in truth.allocations.items()
    }


def test_the_model_follows_submissions_admissions_stops_and_node_changes(
    api: TestClient, ctx: ServerContext
) -> None:
    register(api, ctx, "n1")
    first = submit(api, "first", gpu=2)
    waiting = submit(api, "second", gpu=2)  # n1 has 2 GPUs: this one waits
    assert run_cycle(ctx) == 1
    run_cycle(ctx)  # sees the admission through the change feed
    assert_model_is_the_store(ctx)
    assert set(state(ctx).model.queue) == {waiting}
    assert set(state(ctx).model.allocations) == {first}
    assert position_of(ctx.positions, _job(ctx, waiting)) == 1

    register(api, ctx, "n1", "n2")  # a second node joins
    assert run_cycle(ctx) == 1  # the waiting job goes there
    run_cycle(ctx)
    assert_model_is_the_store(ctx)
    assert {n.name for n in state(ctx).model.nodes} == {"n1", "n2"}

    assert api.post(f"/api/v1/jobs/{first}/stop").status_code in (200, 202)
    run_cycle(ctx)
    assert_model_is_the_store(ctx)  # its tasks are terminating in the model too
    assert all(a.terminating for a in state(ctx).model.allocations[first])


def test_reading_the_feed_reloads_only_what_changed(api: TestClient, ctx: ServerContext) -> None:
    register(api, ctx, "n1")
    submit(api, "a", gpu=2)
    run_cycle(ctx)
    model = state(ctx).model
    before = model.snapshot()[0]
    with ctx.db.read() as session:
        assert model.refresh(ctx, session) >= 1  # the admission's job and task rows
        assert model.refresh(ctx, session) == 0  # nothing new: nothing read
    again = model.snapshot()[0]
    assert again.nodes is before.nodes  # unchanged nodes: the very same tuple (cache identity)


def test_a_model_that_missed_a_change_is_repaired_and_the_difference_logged(
    api: TestClient, ctx: ServerContext, caplog: pytest.LogCaptureFixture
) -> None:
    register(api, ctx, "n1")
    submit(api, "holder", gpu=2)
    run_cycle(ctx)
    blocked = submit(api, "waiting", gpu=2)  # waits for the holder's GPUs
    run_cycle(ctx)
    # A change the feed never reports: bump the job's version and drop the feed rows.
    with ctx.db.write() as session:
        session.execute(update(Job).where(Job.id == blocked).values(version=Job.version + 7))
        session.execute(delete(SchedChange))
    run_cycle(ctx)
    model = state(ctx).model
    assert model.versions[blocked] != full_load(ctx).versions[blocked]  # stale, as injected
    with caplog.at_level(logging.WARNING, logger="shoal.scheduler"), ctx.db.read() as session:
        found = model.verify(ctx, session)
    assert found == [f"job {blocked}: queued version {model.versions[blocked] - 7} is stale"]
    assert "differed from the store" in caplog.text and blocked in caplog.text
    assert_model_is_the_store(ctx)
    with ctx.db.read() as session:
        assert model.verify(ctx, session) == []  # repaired: nothing left to find


def test_a_change_committed_since_the_last_refresh_is_not_taken_for_a_difference(
    api: TestClient, ctx: ServerContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The API writes while the scheduler verifies (a takeover under a load of submissions
    logged "repaired" for jobs submitted just then): the model reads the feed first, in the
    same snapshot as the full load."""
    register(api, ctx, "n1")
    submit(api, "first", gpu=2)
    run_cycle(ctx)
    later = submit(api, "later", gpu=2)  # committed after the model's last refresh
    model = state(ctx).model
    assert later not in model.versions
    with caplog.at_level(logging.WARNING, logger="shoal.scheduler"), ctx.db.snapshot() as session:
        assert model.verify(ctx, session) == []
    assert "differed" not in caplog.text
    assert later in model.versions
    assert_model_is_the_store(ctx)


def test_one_snapshot_does_not_see_what_commits_during_it(
    api: TestClient, ctx: ServerContext
) -> None:
    with ctx.db.snapshot() as session:
        before = session.scalar(select(func.count()).select_from(Job))
        submit(api, "during")
        assert session.scalar(select(func.count()).select_from(Job)) == before
    with ctx.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == before + 1


def test_change_rows_already_read_are_deleted(api: TestClient, ctx: ServerContext) -> None:
    register(api, ctx, "n1")
    for index in range(3):
        submit(api, f"j{index}")
    run_cycle(ctx)
    state(ctx).forgot_at = -1e9  # due now
    run_cycle(ctx)
    with ctx.db.read() as session:
        left = session.scalar(select(func.count()).select_from(SchedChange))
        newest = session.scalar(select(func.max(SchedChange.seq)))
    assert left is not None and left <= 8  # only rows written by the last cycle's own writes
    assert newest is None or newest > state(ctx).model.seq - 100


def _job(ctx: ServerContext, job_id: str) -> Job:
    with ctx.db.read() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


@pytest.mark.sqlite_only  # sqlite_master (PostgreSQL's triggers: tests/store)
def test_every_change_feed_trigger_exists_at_the_head_migration(ctx: ServerContext) -> None:
    """A later migration that rebuilds jobs, tasks, nodes or virtual_clusters (SQLite's batch
    mode copies the table) drops its triggers; it must create them again."""
    with ctx.db.read() as session:
        names = set(
            session.execute(
                text(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'sched_%'"
                )
            ).scalars()
        )
    tables = ("jobs", "tasks", "nodes", "virtual_clusters")
    assert names == {f"sched_{t}_{what}" for t in tables for what in ("insert", "update", "delete")}
