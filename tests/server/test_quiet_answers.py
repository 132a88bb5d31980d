"""Quiet reports and polls answered from memory (server/services/quiet_answers.py): the same
quiet report again is answered without reading the store while nothing a reader acts on changed;
a write of this process, a change another process wrote, a different report and age each send
it back to the store; a due heartbeat still reaches the store, and a node lost meanwhile comes
back through the write path. An orders poll after one that found nothing waits without a read
until news about its nodes, and the job placed then is launched."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.services import agents, quiet_answers
from shoal.server.settings import ServerSettings
from shoal.store.db import Database, home_store
from shoal.store.models import Node
from tests.server.test_api import agent_headers
from tests.server.test_fencing import node_body
from tests.server.test_heartbeats import Clock

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


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """One entry per call of ``agents.<name>`` from now on."""
    calls: list[int] = []
    original = getattr(agents, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(agents, name, counted)
    return calls


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per quiet report evaluated against the store."""
    return _count_calls(monkeypatch, "quiet_report")


def _report(api: TestClient, home: Path, **node: Any) -> dict[str, Any]:
    body = {"agent_id": "a", "nodes": [{**NODE, **node}], "agent_version": "1"}
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _node(ctx: ServerContext) -> Node:
    with ctx.db.read() as session:
        found = session.scalar(select(Node).where(Node.name == "n0"))
        assert found is not None
        return found


def test_the_same_quiet_report_again_is_answered_without_reading_the_store(
    api: TestClient, home: Path, ctx: ServerContext, reads: list[int]
) -> None:
    _report(api, home)  # registers: the write path
    reads.clear()
    _report(api, home, usage={"cpu_percent": 3.0})  # quiet: read once, kept
    assert len(reads) == 1
    for percent in (4.0, 5.0, 6.0):  # only the figures differ
        answer = _report(api, home, usage={"cpu_percent": percent})
        assert answer["kill"] == [] and answer["acked"] == []
    assert len(reads) == 1 and ctx.quiet_answers.hits == 3
    _report(api, home, labels={"rack": "b"})  # a different report: read again
    assert len(reads) == 2
    assert _node(ctx).labels.get("rack") == "b"  # and, not quiet, written


def test_a_write_of_this_process_makes_the_kept_answer_stale(
    api: TestClient, home: Path, ctx: ServerContext, reads: list[int]
) -> None:
    _report(api, home)
    reads.clear()
    _report(api, home)
    _report(api, home)
    assert (len(reads), ctx.quiet_answers.hits) == (1, 1)
    with ctx.db.write() as session:  # say, the scheduler placing a task
        session.execute(update(Node).values(labels={"edited": "yes"}))
    _report(api, home)
    assert len(reads) == 2  # read again
    _report(api, home)
    assert len(reads) == 2  # and kept again


def test_a_heartbeat_alone_does_not_make_the_kept_answer_stale(
    api: TestClient, home: Path, ctx: ServerContext, reads: list[int]
) -> None:
    clock = Clock()
    ctx.clock = clock  # type: ignore[method-assign]
    _report(api, home)
    reads.clear()
    _report(api, home)
    batches = ctx.commits.batches
    clock.now += ctx.settings.heartbeat_write_s + 1  # due
    _report(api, home, usage={"cpu_percent": 9.0})
    assert ctx.commits.batches == batches + 1  # the heartbeat was written, from memory
    assert (_node(ctx).last_seen, _node(ctx).usage) == (clock.now, {"cpu_percent": 9.0})
    clock.now += 1.0  # written 1 s ago: not due again
    _report(api, home)
    assert ctx.commits.batches == batches + 1
    assert len(reads) == 1 and ctx.quiet_answers.hits == 2


def test_a_change_another_process_wrote_is_seen_within_the_generations_age(
    api: TestClient,
    home: Path,
    ctx: ServerContext,
    reads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quiet_answers, "GENERATION_MAX_AGE_S", 0.0)  # read on every report
    _report(api, home)
    reads.clear()
    _report(api, home)
    _report(api, home)
    assert len(reads) == 1
    committed = ctx.db.changes_committed
    other = Database(home_store(home))  # another server or the scheduler process
    try:
        with other.write() as session:  # a node's state is in the change feed
            session.execute(update(Node).values(state="NOT_READY"))
    finally:
        other.dispose()
    assert ctx.db.changes_committed == committed  # this process wrote nothing
    _report(api, home)
    assert len(reads) == 2
    assert _node(ctx).state == "READY"  # the report brought it back, through the write path


def test_a_node_lost_while_the_answer_was_kept_comes_back_when_its_heartbeat_is_due(
    api: TestClient,
    home: Path,
    ctx: ServerContext,
    reads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The generation is read at most every half second: a node marked lost by another process
    just then is found by the guarded heartbeat write, which fails, so the report takes the
    write path and the node is READY again."""
    monkeypatch.setattr(quiet_answers, "GENERATION_MAX_AGE_S", 3600.0)
    clock = Clock()
    ctx.clock = clock  # type: ignore[method-assign]
    _report(api, home)
    _report(api, home)
    other = Database(home_store(home))
    try:
        with other.write() as session:
            session.execute(update(Node).values(state="NOT_READY"))
    finally:
        other.dispose()
    clock.now += ctx.settings.heartbeat_write_s + 1
    _report(api, home)
    assert ctx.quiet_answers.hits == 1  # answered from memory, until the write was refused
    assert (_node(ctx).state, _node(ctx).last_seen) == ("READY", clock.now)


def test_a_kept_answer_is_read_again_after_its_age(
    api: TestClient,
    home: Path,
    ctx: ServerContext,
    reads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _report(api, home)
    reads.clear()
    _report(api, home)
    monkeypatch.setattr(quiet_answers, "MAX_AGE_S", 0.0)
    _report(api, home)
    assert len(reads) == 2


def test_the_change_feed_going_back_to_an_earlier_value_is_still_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On PostgreSQL the generation is the largest number kept; the scheduler deleting the rows
    it read can bring it back to a value an answer was kept at."""
    generations = iter([5, 9, 5])

    class Store:
        changes_committed = 0

    answers = quiet_answers.QuietAnswers(Store())  # type: ignore[arg-type]
    monkeypatch.setattr(quiet_answers, "store_generation", lambda _db: next(generations))
    versions = []
    for _ in range(3):
        answers._generation_read_at = -float("inf")  # as if half a second went by
        versions.append(asyncio.run(answers.version()))
    assert len({v.epoch for v in versions}) == 3


@pytest.fixture
def order_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per orders poll that read the store."""
    return _count_calls(monkeypatch, "_orders")


def _poll(api: TestClient, home: Path, known: list[str] | None = None) -> dict[str, Any]:
    body = {"agent_id": "a", "nodes": ["n0"], "known": known or [], "wait_s": 0}
    answer = api.post("/api/v1/agent/orders", json=body, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_poll_after_one_that_found_nothing_reads_nothing_until_news_of_its_nodes(
    api: TestClient, home: Path, ctx: ServerContext, order_reads: list[int]
) -> None:
    _report(api, home)
    assert _poll(api, home)["launch"] == []  # read: nothing
    for _ in range(3):
        assert _poll(api, home)["launch"] == []
    assert (len(order_reads), ctx.quiet_polls.hits) == (1, 3)
    _poll(api, home, known=["7.1"])  # other known attempts: read
    assert len(order_reads) == 2
    ctx.wake_agents(["another-node"])  # news about another node changes nothing here
    _poll(api, home, known=["7.1"])
    assert len(order_reads) == 2
    token = (home / "admin.token").read_text().strip()
    job = "version: 1\nname: q\nroles:\n  w:\n    resources: {cpu: 1}\n    command: 'true'\n"
    submitted = api.post(
        "/api/v1/jobs", json={"spec": job}, headers={"Authorization": f"Bearer {token}"}
    )
    assert submitted.status_code == 201, submitted.text
    assert run_cycle(ctx) == 1  # placed on n0: news for it
    launched = _poll(api, home, known=["7.1"])["launch"]
    assert [order["job_id"] for order in launched] == [submitted.json()[0]["id"]]
    assert len(order_reads) == 3
    _poll(api, home, known=["7.1"])  # the launch is not "nothing": the next poll reads
    assert len(order_reads) == 4


def test_a_held_poll_woken_by_news_reads_and_the_next_quiet_one_does_not(
    api: TestClient, home: Path, ctx: ServerContext, order_reads: list[int]
) -> None:
    _report(api, home)
    _poll(api, home)  # read: nothing
    body = {"agent_id": "a", "nodes": ["n0"], "known": [], "wait_s": 20}
    answers: list[int] = []

    def held() -> None:
        answer = api.post("/api/v1/agent/orders", json=body, headers=agent_headers(home))
        answers.append(answer.status_code)

    thread = threading.Thread(target=held)
    thread.start()
    deadline = time.monotonic() + 10
    try:
        while not ctx.agent_work._waiters.get("n0") and time.monotonic() < deadline:
            time.sleep(0.01)  # parked without a read (the first poll found nothing)
        reads_while_held = len(order_reads)
    finally:  # news (say, a kill asked and withdrawn): read again, nothing
        ctx.wake_agents(["n0"])
        thread.join(timeout=10)
    assert reads_while_held == 1
    assert answers == [200] and len(order_reads) == 2
    _poll(api, home)
    assert len(order_reads) == 2 and ctx.quiet_polls.hits == 2
