"""Backup and restore with PostgreSQL as the store (docs/backup.md, docs/postgresql.md), on a
throwaway cluster (tests/postgresql.py): a PostgreSQL server's backup is the same tar as a SQLite
server's and restores into a SQLite home and back into its own database; a SQLite backup restores
into a PostgreSQL home; a write committed while the backup copies is wholly in or wholly out; a
database holding another cluster is refused unless --force, and nothing is changed."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Table, func, select, text
from typer.testing import CliRunner

from shoal.backup_archive import DATABASE, BackupError, verify
from shoal.cli.main import app
from shoal.local.restore import restore
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.auth import hash_token
from shoal.server.settings import ServerSettings
from shoal.store import copy
from shoal.store.db import Database, record_store
from shoal.store.models import Job, SchedulerLeaseRow, Token, User
from tests.envs import without_shoal
from tests.integration.test_scheduler_failover import _run, _shoal, _start, _stop, _until
from tests.server.test_backup import CODE, HEAD, JOB, OLDER, backup_at, rewrite


@contextlib.contextmanager
def server(home: Path, store: str | None = None) -> Iterator[TestClient]:
    """An in-process server on ``home`` (its store: ``store``, else the home's), as admin."""
    ctx = prepare(ServerSettings(home=home, database_url=store))
    try:
        with TestClient(create_app(ctx, run_scheduler=False)) as api:
            api.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
            yield api
    finally:
        ctx.db.dispose()


def submit(api: TestClient, name: str, code: bool = False) -> str:
    body = {"spec": JOB.format(name=name)}
    if code:
        body["code_archive"] = base64.b64encode(CODE).decode()
    answer = api.post("/api/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()[0]["id"])


def take_backup(api: TestClient, target: Path) -> dict[str, object]:
    answer = api.get("/api/v1/admin/backup")
    assert answer.status_code == 200, answer.text
    target.write_bytes(answer.content)
    return verify(target).data


def listed(api: TestClient) -> list[str]:
    return sorted(job["name"] for job in api.get("/api/v1/jobs").json())


def code_of_job_1(api: TestClient) -> bytes:
    answer = api.get("/api/v1/agent/code/1", headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)})
    assert answer.status_code == 200, answer.text
    return answer.content


def postgresql_home(home: Path, store: str) -> Path:
    home.mkdir(mode=0o700)
    record_store(home, store)
    return home


def set_lease(store: str, token: int, expires_at: float) -> None:
    """The scheduler lease row as a server on another host would have left it."""
    db = Database(store)
    try:
        with db.write() as session:
            session.merge(
                SchedulerLeaseRow(
                    name="scheduler", holder="head2:/srv/shoal", incarnation="run-1",
                    token=token, expires_at=expires_at, acquired_at=0.0,
                )
            )  # fmt: skip
    finally:
        db.dispose()


def lease(store: str) -> tuple[int, float]:
    db = Database(store)
    try:
        with db.read() as session:
            row = session.scalars(select(SchedulerLeaseRow)).one()
            return row.token, row.expires_at
    finally:
        db.dispose()


def test_a_postgresql_backup_restores_into_sqlite_and_into_its_own_database(
    tmp_path: Path, pg_store: str
) -> None:
    home, backup = postgresql_home(tmp_path / "pg-home", pg_store), tmp_path / "backup.tar"
    with server(home) as api:
        submit(api, "coded", code=True)
        submit(api, "plain")
        set_lease(pg_store, token=3, expires_at=time.time() + 60)
        manifest = take_backup(api, backup)
        submit(api, "after")  # not in the backup
    assert manifest["jobs"] == 2 and manifest["schemaRevision"] == HEAD
    (blob,) = manifest["blobs"]  # type: ignore[misc]
    assert blob["jobCode"] and not list((home / "blobs" / "tmp").iterdir())
    with tarfile.open(backup) as archive:
        assert archive.getnames()[:2] == ["shoal-backup.json", DATABASE]

    fresh = tmp_path / "sqlite-home"
    done = restore(backup, fresh)
    assert done.blobs_added == 1 and (fresh / DATABASE).exists()
    with server(fresh) as api:
        assert listed(api) == ["coded", "plain"]
        assert code_of_job_1(api) == CODE
        submit(api, "new")  # ids go on past the restored ones

    set_lease(pg_store, token=7, expires_at=time.time() + 60)  # another host's server leads
    with pytest.raises(BackupError, match="holds its scheduler lease; stop every server"):
        restore(backup, home)
    set_lease(pg_store, token=7, expires_at=time.time() - 1)  # ... and was stopped
    done = restore(backup, home)  # the home's own cluster: no --force needed
    assert done.kept_aside is not None and done.kept_aside.name.startswith("shoal.db.before-")
    assert not (home / DATABASE).exists()  # the data went into PostgreSQL
    with contextlib.closing(sqlite3.connect(done.kept_aside)) as kept:
        names = {row[0] for row in kept.execute("SELECT name FROM jobs")}
    assert names == {"coded", "plain", "after"}  # what it replaced, kept as a SQLite store
    assert lease(pg_store) == (8, 0.0)  # expired, its token above any issued before
    with server(home) as api:
        assert listed(api) == ["coded", "plain"]
        assert code_of_job_1(api) == CODE
        assert submit(api, "next") == "3"  # the sequence moved past the restored ids


def test_a_sqlite_backup_restores_into_a_postgresql_home(tmp_path: Path, pg_store: str) -> None:
    source, backup = tmp_path / "sqlite-home", tmp_path / "backup.tar"
    with server(source) as api:
        submit(api, "coded", code=True)
        submit(api, "plain")
        take_backup(api, backup)

    home = postgresql_home(tmp_path / "pg-home", pg_store)
    done = restore(backup, home)  # an empty database: the migrations make the schema
    assert done.kept_aside is None and done.blobs_added == 1
    assert not (home / DATABASE).exists() and not list(home.glob("shoal.db*"))
    db = Database(pg_store)
    try:
        with db.read() as session:
            assert session.scalar(select(func.count()).select_from(Job)) == 2
    finally:
        db.dispose()
    with server(home) as api:  # a new admin token for this home, the old one still known
        assert listed(api) == ["coded", "plain"]
        assert code_of_job_1(api) == CODE
        assert submit(api, "next") == "3"


def test_a_write_committed_while_the_copy_runs_is_wholly_out_and_one_before_wholly_in(
    tmp_path: Path, pg_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Users are copied before tokens. One transaction adds a user and its token after the copy
    has read users and before it reads tokens: a copy without one snapshot would hold the token
    without its user (or fail on it)."""
    home, backup = postgresql_home(tmp_path / "pg-home", pg_store), tmp_path / "backup.tar"
    batches, written = copy._batches, []

    def write_user(name: str) -> None:
        db = Database(pg_store)
        try:
            with db.write() as session:
                user = User(name=name, is_admin=False, created_at=0.0)
                session.add(user)
                session.flush()
                session.add(
                    Token(user_id=user.id, token_hash=hash_token(name), kind="user", created_at=0.0)
                )
                session.add(
                    Token(
                        user_id=user.id,
                        token_hash=hash_token(name + "2"),
                        kind="user",
                        created_at=0.0,
                    )
                )
        finally:
            db.dispose()

    def batches_with_a_write(connection: Connection, table: Table) -> Iterator[object]:
        if table.name == "tokens" and not written:
            write_user("during")
            written.append(True)
            setting = "SELECT current_setting('transaction_{}')"
            seen = connection.exec_driver_sql(setting.format("isolation")).scalar()
            assert seen == "repeatable read"
            assert connection.exec_driver_sql(setting.format("read_only")).scalar() == "on"
        yield from batches(connection, table)

    with server(home) as api:
        write_user("before")
        monkeypatch.setattr(copy, "_batches", batches_with_a_write)
        take_backup(api, backup)
        monkeypatch.setattr(copy, "_batches", batches)
        names = sorted(user["name"] for user in api.get("/api/v1/users").json())
    assert written and "during" in names  # it was committed, while the copy ran

    fresh = tmp_path / "sqlite-home"
    restore(backup, fresh)
    with contextlib.closing(sqlite3.connect(fresh / DATABASE)) as db:
        users = {row[0] for row in db.execute("SELECT name FROM users")}
        hashes = {row[0] for row in db.execute("SELECT token_hash FROM tokens")}
    assert "before" in users and {hash_token("before"), hash_token("before2")} <= hashes
    assert "during" not in users
    assert not {hash_token("during"), hash_token("during2")} & hashes


def test_a_database_with_another_clusters_data_is_refused_unless_forced(
    tmp_path: Path, pg_store: str
) -> None:
    with server(tmp_path / "other", pg_store) as api:  # another home's cluster in the database
        submit(api, "theirs")
    with server(tmp_path / "source") as api:
        submit(api, "ours")
        take_backup(api, tmp_path / "backup.tar")
    home = postgresql_home(tmp_path / "pg-home", pg_store)
    command = ["admin", "restore", str(tmp_path / "backup.tar"), "--home", str(home)]

    refused = CliRunner().invoke(app, command)
    assert refused.exit_code == 1
    message = " ".join(refused.output.split())
    assert "holds another cluster's data" in message and "--force" in message
    assert "(StoreHoldsAnotherCluster); nothing was changed" in message
    assert sorted(home.iterdir()) == [home / "store.url"]  # no file, no blob, no copy
    db = Database(pg_store)
    try:
        with db.read() as session:
            assert list(session.scalars(select(Job.name))) == ["theirs"]
    finally:
        db.dispose()

    forced = CliRunner().invoke(app, [*command, "--force"])
    assert forced.exit_code == 0, forced.output
    (kept,) = home.glob("shoal.db.before-restore-*")
    assert f"kept as {kept}" in " ".join(forced.output.split())
    with contextlib.closing(sqlite3.connect(kept)) as db:
        assert [row[0] for row in db.execute("SELECT name FROM jobs")] == ["theirs"]
    with server(home) as api:
        assert listed(api) == ["ours"]


def test_an_older_backup_is_migrated_as_it_loads_and_a_refused_row_rolls_the_load_back(
    tmp_path: Path, pg_store: str
) -> None:
    home = postgresql_home(tmp_path / "pg-home", pg_store)
    older = tmp_path / "older.tar"
    backup_at(OLDER, older, tmp_path / "older.db")
    restore(older, home)
    assert stored_revision(pg_store) == HEAD

    good = tmp_path / "good.tar"
    with server(tmp_path / "source") as api:
        submit(api, "kept")
        take_backup(api, good)
    restore(good, home)  # the older backup held no rows: nothing to keep aside
    assert not list(home.glob("shoal.db*"))
    too_long = tmp_path / "too-long.tar"  # SQLite ignores VARCHAR(64); PostgreSQL does not
    rewrite(good, too_long, HEAD, f"UPDATE users SET name = '{'x' * 65}' WHERE name = 'admin'")
    with pytest.raises(BackupError, match="rolled back whole") as refused:
        restore(too_long, home)
    assert refused.value.code == "RestoreLoadFailed"
    assert not list(home.glob("shoal.db*"))  # the copy of what it held was removed again
    with server(home) as api:
        assert listed(api) == ["kept"]


def stored_revision(store: str) -> str:
    db = Database(store)
    try:
        with db.read() as session:
            return str(session.scalar(text("SELECT version_num FROM alembic_version")))
    finally:
        db.dispose()


def test_shoal_admin_backup_of_a_running_postgresql_server_under_submissions(
    tmp_path: Path, pg_store: str
) -> None:
    """Real processes: `shoal server start` on PostgreSQL, `shoal admin backup` while a client
    submits; the server stopped, `shoal admin restore` into its own home and into a SQLite
    home: every job acknowledged before the backup began is back in both, none sent after it
    ended, and the restarted server goes on issuing ids."""
    first = _start(tmp_path, "pg-home", pg_store)
    home, backup = first.home, tmp_path / "backup.tar"
    env = without_shoal(os.environ) | {"SHOAL_CONFIG": str(tmp_path / "config.yaml")}
    env |= {"SHOAL_URL": first.url, "SHOAL_CA": str(home / "pki" / "ca.crt")}
    env["SHOAL_TOKEN"] = (home / "admin.token").read_text().strip()
    acked: list[tuple[str, float, float]] = []
    ended = threading.Event()

    def submitting() -> None:
        after = 0  # sent once the backup ended: a few, then stop (bounded: 2,000 at most)
        for n in range(2000):
            if ended.is_set():
                if after >= 5:
                    return
                after += 1
            sent = time.monotonic()
            answer = first.api.post("/api/v1/jobs", json={"spec": JOB.format(name=f"j{n}")})
            assert answer.status_code == 201, answer.text
            acked.append((str(answer.json()[0]["id"]), sent, time.monotonic()))

    try:
        client = threading.Thread(target=submitting)
        client.start()
        _until(lambda: len(acked) >= 20, 60, "20 submissions")
        began = time.monotonic()
        made = subprocess.run(
            _shoal("admin", "backup", str(backup)), env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        done_at = time.monotonic()
        ended.set()
        client.join(timeout=120)
        assert made.returncode == 0, made.stdout + made.stderr
    finally:
        _stop(first)
    before = {job for job, _, answered in acked if answered < began}
    after = {job for job, sent, _ in acked if sent > done_at}
    assert before and after, (len(before), len(after))
    count = int(verify(backup).data["jobs"])  # type: ignore[call-overload]

    for target in (home, tmp_path / "sqlite-home"):
        restored = subprocess.run(
            _shoal("admin", "restore", str(backup), "--home", str(target)),
            env=without_shoal(os.environ), capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert restored.returncode == 0, restored.stdout + restored.stderr
    assert not (home / DATABASE).exists() and (tmp_path / "sqlite-home" / DATABASE).exists()
    again = _run(home, without_shoal(os.environ))
    try:
        ids = {str(job["id"]) for job in again.api.get("/api/v1/jobs?limit=10000").json()}
        assert len(ids) == count and before <= ids and not after & ids
        new = again.api.post("/api/v1/jobs", json={"spec": JOB.format(name="new")})
        assert new.status_code == 201 and int(new.json()[0]["id"]) == count + 1
    finally:
        _stop(again)
    with server(tmp_path / "sqlite-home") as api:
        assert len(api.get("/api/v1/jobs?limit=10000").json()) == count
