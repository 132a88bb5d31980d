"""Group commit (``server.group_commit``) on a real SQLite store: writes waiting together share
one transaction, none is answered before its transaction has committed, a refusal leaves its
neighbours alone, and a write that fails otherwise is stored by nobody."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, event, text
from sqlalchemy.orm import Session

from shoal.server import group_commit
from shoal.server.context import ApiError
from shoal.server.group_commit import GroupCommit
from shoal.store.db import Database, sqlite_url


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(sqlite_url(tmp_path))
    notes = Table(  # the id numbered by the store, whichever it is
        "notes", MetaData(), Column("id", Integer, primary_key=True), Column("body", Text)
    )
    with database.engine.begin() as connection:
        notes.create(connection)
    yield database
    database.dispose()


def insert(body: str) -> Callable[[Session], str]:
    def write(session: Session) -> str:
        session.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": body})
        return body

    return write


async def _until(flag: threading.Event) -> None:
    """Until the writer thread has taken the first write (so the next ones queue behind it)."""
    for _ in range(1000):
        if flag.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the writer never started")


def stored(db: Database) -> list[str]:
    with db.read() as session:
        return [row[0] for row in session.execute(text("SELECT body FROM notes ORDER BY id"))]


def test_writes_waiting_together_share_one_commit_and_are_answered_after_it(
    db: Database,
) -> None:
    commits: list[int] = []
    answered_before_commit: list[str] = []
    group = GroupCommit(db, ApiError, lambda: None)
    gate = threading.Event()
    event.listen(db.sessions, "after_commit", lambda _: commits.append(len(commits)))

    started = threading.Event()

    def held(session: Session) -> str:
        started.set()
        gate.wait(10)  # the writer is busy: the next ten queue up behind this one
        return insert("first")(session)

    async def scenario() -> list[str]:
        first = asyncio.create_task(group.run(held))
        await _until(started)
        rest = [asyncio.create_task(group.run(insert(f"n{i}"))) for i in range(10)]
        await asyncio.sleep(0.05)

        def early(task: asyncio.Task[str]) -> None:
            if len(commits) < 2:
                answered_before_commit.append(task.result())

        for task in rest:
            task.add_done_callback(early)
        gate.set()
        return [await first, *[await task for task in rest]]

    results = asyncio.run(scenario())
    group.stop()
    assert results == ["first", *[f"n{i}" for i in range(10)]]
    assert (group.batches, group.writes) == (2, 11)  # the ten that waited: one transaction
    assert answered_before_commit == []
    assert stored(db) == results


def test_a_refusal_leaves_the_rest_of_its_batch_alone(db: Database) -> None:
    group = GroupCommit(db, ApiError, lambda: None)

    def refuse(_: Session) -> str:
        raise ApiError(409, "ConflictJobError", "no")

    async def scenario() -> list[object]:
        writes = [insert("a"), refuse, insert("b")]
        tasks = [asyncio.create_task(group.run(w)) for w in writes]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    a, refused, b = asyncio.run(scenario())
    group.stop()
    assert (a, b) == ("a", "b")
    assert isinstance(refused, ApiError) and refused.code == "ConflictJobError"
    assert stored(db) == ["a", "b"]


def test_a_write_that_breaks_is_stored_by_nobody_and_its_neighbours_are_retried(
    db: Database,
) -> None:
    woke: list[int] = []
    group = GroupCommit(db, ApiError, lambda: woke.append(1))
    gate = threading.Event()

    def half_done(session: Session) -> str:
        insert("half")(session)
        raise RuntimeError("broken after writing")

    started = threading.Event()

    def held(session: Session) -> str:
        started.set()
        gate.wait(10)
        return insert("first")(session)

    async def scenario() -> list[object]:
        first = asyncio.create_task(group.run(held))
        await _until(started)
        batch = [insert("a"), half_done, insert("b")]
        tasks = [asyncio.create_task(group.run(w)) for w in batch]
        await asyncio.sleep(0.05)
        gate.set()
        return list(await asyncio.gather(first, *tasks, return_exceptions=True))

    first, a, broken, b = asyncio.run(scenario())
    group.stop()
    assert (first, a, b) == ("first", "a", "b")
    assert isinstance(broken, RuntimeError)
    assert stored(db) == ["first", "a", "b"]  # nothing of the broken write
    assert len(woke) == 3  # the first batch, then a and b on their own


def test_heartbeats_arriving_apart_share_a_commit_and_a_waited_on_write_ends_the_wait(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that begins with a heartbeat (``wake`` False) waits ``HEARTBEAT_LINGER_S`` for
    more; a write someone waits on (``wake`` True) is committed with them at once."""
    monkeypatch.setattr(group_commit, "HEARTBEAT_LINGER_S", 5.0)  # long: the test is not racy
    group = GroupCommit(db, ApiError, lambda: None)

    async def apart() -> float:
        first = asyncio.ensure_future(group.run(insert("beat-1"), wake=False))
        await asyncio.sleep(0.2)  # spread out, as idle agents' reports are
        second = asyncio.ensure_future(group.run(insert("beat-2"), wake=False))
        await asyncio.sleep(0.2)
        began = time.monotonic()
        await group.run(insert("submission"))  # ends the wait
        await asyncio.gather(first, second)
        return time.monotonic() - began

    try:
        waited = asyncio.run(apart())
    finally:
        group.stop()
    assert group.batches == 1 and stored(db) == ["beat-1", "beat-2", "submission"]
    assert waited < 2.5  # not the 5 s linger
