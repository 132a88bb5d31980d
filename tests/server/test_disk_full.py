"""A full disk under SHOAL_HOME (a real tmpfs, docs/disk.md): submissions are refused with 507
StorageFull below the reserve; a write that meets the full disk (SQLITE_FULL, ENOSPC) is
rolled back and answered 507, never 500; reads go on; the database stays sound; stored logs
stop with one marker and go on below it; everything works again once space returns."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.services.log_pause import MARKER_PREFIX, read_shift
from shoal.server.services.logs import _append_at
from shoal.server.settings import ServerSettings
from shoal.server.storage import Space, space
from tests.tmpfs import MiB, fill, integrity, mounted_tmpfs

JOB = "version: 1\nname: {name}\nroles:\n  w:\n    command: echo hi\n"

pytestmark = pytest.mark.sqlite_only  # SQLite's own disk-full errors


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", 16) as where:
        yield where


def serve(home: Path, **settings: object) -> TestClient:
    ctx = prepare(ServerSettings(home=home, **settings))  # type: ignore[arg-type]
    client = TestClient(create_app(ctx, run_scheduler=False))
    client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
    return client


def submit(api: TestClient, name: str) -> object:
    return api.post("/api/v1/jobs", json={"spec": JOB.format(name=name)})


def job_count(home: Path) -> int:
    with sqlite3.connect(home / "shoal.db") as connection:
        return int(connection.execute("SELECT count(*) FROM jobs").fetchone()[0])


def test_below_the_reserve_submissions_get_507_and_other_writes_and_reads_go_on(
    disk: Path,
) -> None:
    home = disk / "home"
    with serve(home) as api:
        assert submit(api, "before").status_code == 201
        reserve = space(api.app.state.context.settings).reserve  # type: ignore[attr-defined]
        assert reserve == int(16 * MiB * 0.05)  # the fraction: 64 MiB is more than the disk
        fill(disk / "filler", leave=reserve // 2)

        refused = submit(api, "refused")
        assert refused.status_code == 507, refused.text
        body = refused.json()
        assert body["code"] == "StorageFull"
        assert str(home) in body["message"] and "free of 16.0 MiB" in body["message"]
        assert "below the 819.2 KiB shoal keeps free" in body["message"]
        v2 = api.post("/api/v2/jobs", content=JOB.format(name="pai"))
        assert v2.status_code == 507, v2.text
        # Small writes still fit in the reserve; reads need no space.
        assert api.post("/api/v1/jobs/1/stop").status_code == 202
        assert api.post("/api/v1/users", json={"name": "ann"}).status_code == 201
        assert [j["name"] for j in api.get("/api/v1/jobs").json()] == ["before"]
        assert integrity(home / "shoal.db") == "ok"

        (disk / "filler").unlink()
        assert submit(api, "after").status_code == 201
    assert job_count(home) == 2
    assert integrity(home / "shoal.db") == "ok"


def test_sqlite_full_is_507_rolled_back_for_every_write_and_reads_go_on(disk: Path) -> None:
    home = disk / "home"
    with serve(home, storage_reserve_bytes=0) as api:  # no reserve: SQLite meets the full disk
        assert submit(api, "before").status_code == 201
        with sqlite3.connect(home / "shoal.db") as connection:  # an empty WAL: writes must grow it
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fill(disk / "filler")

        answers = {
            "submit": submit(api, "refused"),
            "stop": api.post("/api/v1/jobs/1/stop"),
            "user": api.post("/api/v1/users", json={"name": "ann"}),
            "vc": api.post("/api/v1/virtual-clusters/team", json={}),
        }
        for what, answer in answers.items():
            assert answer.status_code == 507, (what, answer.text)
            assert answer.json()["code"] == "StorageFull", what
            assert "the disk holding" in answer.json()["message"], what
        listed = api.get("/api/v1/jobs").json()
        assert [(j["name"], j["state"]) for j in listed] == [("before", "WAITING")]
        assert api.get("/api/v1/users").status_code == 200
        assert integrity(home / "shoal.db") == "ok"
        assert job_count(home) == 1  # nothing half-written

        (disk / "filler").unlink()
        assert submit(api, "after").status_code == 201
        assert api.post("/api/v1/jobs/1/stop").status_code == 202
        assert api.post("/api/v1/users", json={"name": "ann"}).status_code == 201
    assert job_count(home) == 2
    assert integrity(home / "shoal.db") == "ok"


def low(where: Path) -> Space:
    return Space(where, free=1000, total=16 * MiB, reserve=4096)


def test_a_log_below_the_reserve_stops_with_one_marker_and_goes_on_below_it(disk: Path) -> None:
    log = disk / "logs" / "stdout"
    room = space(ServerSettings(home=disk))
    assert _append_at(log, 0, b"one\n", 1.0, room) == 4
    assert _append_at(log, 4, b"two\n", 2.0, low(disk)) == 4  # held back: the agent resends
    assert _append_at(log, 4, b"two\nthree\n", 3.0, low(disk)) == 4  # no second marker
    text = log.read_bytes()
    assert text.startswith(b"one\n" + MARKER_PREFIX) and text.count(MARKER_PREFIX) == 1
    assert b"the disk under" in text and text.endswith(b"once space returns]\n")
    marker = len(text) - 4
    assert read_shift(log) == marker

    assert _append_at(log, 4, b"two\nthree\n", 4.0, room) == 14  # the agent's offsets
    assert _append_at(log, 14, b"four\n", 5.0, room) == 19
    assert _append_at(log, 4, b"two\n", 5.0, room) == 19  # already stored
    assert log.read_bytes() == text + b"two\nthree\nfour\n"


def test_a_log_append_that_meets_enospc_leaves_nothing_half_written(disk: Path) -> None:
    log = disk / "logs" / "stdout"
    room = space(ServerSettings(home=disk, storage_reserve_bytes=0))
    assert _append_at(log, 0, b"start\n", 1.0, room) == 6
    fill(disk / "filler")
    chunk = os.urandom(256 * 1024)
    assert _append_at(log, 6, chunk, 2.0, room) == 6
    stored = log.read_bytes()
    assert stored.startswith(b"start\n") and chunk[:4096] not in stored  # cut back
    (disk / "filler").unlink()
    assert _append_at(log, 6, chunk, 3.0, room) == 6 + len(chunk)
    assert log.read_bytes().endswith(chunk)
    assert log.read_bytes().count(MARKER_PREFIX) <= 1
