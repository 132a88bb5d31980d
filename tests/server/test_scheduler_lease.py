"""One scheduler among several servers on one store (docs/postgresql.md, "One scheduler";
services/scheduler_lease.py): two servers' contexts on the same store (SQLite here, PostgreSQL
under ``make test-postgresql``), each with its own home, clocks the test moves by hand."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.services.scheduler_lease import LeaseKeeper, StaleLeader
from shoal.server.services.silent_nodes import lose_silent_nodes
from shoal.server.settings import ServerSettings
from shoal.store.db import Database
from shoal.store.models import Job, SchedulerLeaseRow
from tests.server.test_fencing import report, submit

LEASE_S = 6.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def first(tmp_path: Path, clock: Clock) -> Iterator[ServerContext]:
    ctx = prepare(ServerSettings(home=tmp_path / "a", scheduler_lease_s=LEASE_S))
    ctx.clock = clock
    yield ctx
    ctx.db.dispose()


def other_server(first: ServerContext, home: Path) -> ServerContext:
    """A second server on the first one's store, with its own home (so another holder)."""
    settings = dataclasses.replace(first.settings, home=home)
    ctx = ServerContext(settings=settings, db=Database(first.settings.database_url or ""))
    ctx.clock = first.clock
    return ctx


@pytest.fixture
def second(first: ServerContext, tmp_path: Path) -> Iterator[ServerContext]:
    ctx = other_server(first, tmp_path / "b")
    yield ctx
    ctx.db.dispose()


def lease_row(ctx: ServerContext) -> SchedulerLeaseRow:
    with ctx.db.read() as session:
        row = session.get(SchedulerLeaseRow, "scheduler")
        assert row is not None
        return row


def test_one_server_holds_the_lease_and_another_takes_it_only_once_it_expired(
    first: ServerContext, second: ServerContext, clock: Clock
) -> None:
    a, b = LeaseKeeper(first), LeaseKeeper(second)
    held = a.hold()
    assert held is not None and held.token == 1 and held.fresh
    assert b.hold() is None  # a holds it
    clock.now += LEASE_S / 2
    assert a.hold() == held.__class__(1, fresh=False)  # renewed: expires LEASE_S from now
    clock.now += LEASE_S - 0.5
    assert b.hold() is None  # renewed, so not expired yet
    clock.now += 1.0
    taken = b.hold()
    assert taken is not None and taken.token == 2 and taken.fresh
    row = lease_row(first)
    assert (row.holder, row.token) == (b.holder, 2)
    assert a.hold() is None  # a learns it lost the lease


def test_a_server_started_again_takes_its_own_lease_back_at_once(
    first: ServerContext, clock: Clock
) -> None:
    """A killed server's lease does not hold its own restart up (same host and home, the old
    run's process gone); a run of the same home still alive keeps it until it expires."""
    before = LeaseKeeper(first)
    assert before.hold() is not None
    again = LeaseKeeper(first)  # a second run while the first's process (this one) lives
    assert again.hold() is None
    ended = subprocess.Popen(["true"])
    ended.wait()  # reaped: its pid names no process now, as a killed server's
    with first.db.write() as session:
        row = session.get(SchedulerLeaseRow, "scheduler")
        assert row is not None
        row.incarnation = f"{ended.pid}-killed"
    held = again.hold()
    assert held is not None and held.token == 2 and held.fresh


def test_a_clean_stop_lets_another_server_take_over_without_waiting(
    first: ServerContext, second: ServerContext
) -> None:
    a, b = LeaseKeeper(first), LeaseKeeper(second)
    assert a.hold() is not None
    a.release()
    held = b.hold()
    assert held is not None and held.token == 2


def test_a_paused_schedulers_plan_is_refused_and_the_new_leader_places_the_job(
    first: ServerContext, second: ServerContext, clock: Clock
) -> None:
    """The first server's scheduler holds the lease, then stops for longer than the lease (as
    under SIGSTOP); the second takes over. The first's next plan is refused whole: the job is
    still waiting, nothing is written, and the new leader places it."""
    token = (first.settings.home / "admin.token").read_text().strip()
    with TestClient(create_app(first, run_scheduler=False)) as api:
        api.headers["Authorization"] = f"Bearer {token}"
        report(api, first.settings.home, ["n0"])
        job_id = submit(api, "fenced")
    a = first.scheduler_lease = LeaseKeeper(first)
    b = second.scheduler_lease = LeaseKeeper(second)
    assert a.hold() is not None
    clock.now += LEASE_S + 1  # the first is paused past its lease
    assert b.hold() is not None
    with pytest.raises(StaleLeader, match=r"held by .*:.*b \(token 2\)"):
        run_cycle(first, check_nodes=False)  # its plan admits the job: refused
    with first.db.read() as session:
        assert session.scalar(select(Job.state).where(Job.id == job_id)) == "WAITING"
    clock.now += first.settings.node_timeout_s + 1  # n0 is late now: losing it is a write too
    with pytest.raises(StaleLeader):
        lose_silent_nodes(first)
    clock.now -= first.settings.node_timeout_s + 1
    assert run_cycle(second, check_nodes=False) == 1
    with second.db.read() as session:
        assert session.scalar(select(Job.state).where(Job.id == job_id)) != "WAITING"
