"""What a backup holds and what a restore checks (docs/backup.md): the database and the code
archives its jobs need, the schema revision and version in its manifest; a restore into a new
home brings both back; a backup of a newer schema is refused, an older one is migrated when the
server starts; a cut-short file is refused."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import sqlite3
import tarfile
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from shoal import __version__
from shoal.backup_archive import DATABASE, FORMAT, MANIFEST, BackupError, bytes_member, end, verify
from shoal.local.restore import restore
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import MIGRATIONS

HEAD = ScriptDirectory(str(MIGRATIONS)).get_current_head()
OLDER = "0020"  # any revision before the head
JOB = "version: 1\nname: {name}\nroles:\n  w:\n    command: python main.py\n"

# the SQLite path (online backup); PostgreSQL's: tests/store/test_postgresql_backup.py
pytestmark = pytest.mark.sqlite_only


def make_code_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("main.py")
        info.size = 12
        archive.addfile(info, io.BytesIO(b"print('hi')\n"))
    return buffer.getvalue()


CODE = make_code_archive()


def backed_up(home: Path, target: Path) -> dict[str, object]:
    """A server on ``home`` with one job with code and one without; its backup in ``target``."""
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx, run_scheduler=False)) as api:
        api.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        code = base64.b64encode(CODE).decode()
        spec = {"spec": JOB.format(name="coded"), "code_archive": code}
        assert api.post("/api/v1/jobs", json=spec).status_code == 201
        assert api.post("/api/v1/jobs", json={"spec": JOB.format(name="plain")}).status_code == 201
        answer = api.get("/api/v1/admin/backup")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/x-tar"
        target.write_bytes(answer.content)
    assert not list((home / "blobs" / "tmp").iterdir())  # the database copy is gone
    return verify(target).data


def rewrite(backup: Path, target: Path, revision: str, change: str = "SELECT 1") -> None:
    """The backup with its database (and manifest) set to schema ``revision``, after the SQL
    ``change``; without its blobs."""
    with tarfile.open(backup) as archive:
        manifest = json.loads(archive.extractfile(MANIFEST).read())  # type: ignore[union-attr]
        database = archive.extractfile(DATABASE).read()  # type: ignore[union-attr]
    scratch = target.with_suffix(".db")
    scratch.write_bytes(database)
    with contextlib.closing(sqlite3.connect(scratch)) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        db.execute(change)
        db.commit()
    database = scratch.read_bytes()
    manifest |= {"schemaRevision": revision, "blobs": [], "legacyCode": []}
    manifest["database"] = {"size": len(database), "sha256": hashlib.sha256(database).hexdigest()}
    parts = [*bytes_member(MANIFEST, json.dumps(manifest).encode(), 0)]
    parts += [*bytes_member(DATABASE, database, 0), end()]
    target.write_bytes(b"".join(parts))


def backup_at(revision: str, target: Path, scratch: Path) -> None:
    """A backup of an empty store at schema ``revision`` (made by that revision's migrations)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = create_engine(f"sqlite:///{scratch}")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    engine.dispose()
    database = scratch.read_bytes()
    manifest = {
        "format": FORMAT,
        "shoalVersion": "0.0.1",
        "schemaRevision": revision,
        "jobs": 0,
        "database": {"size": len(database), "sha256": hashlib.sha256(database).hexdigest()},
        "blobs": [],
        "legacyCode": [],
    }
    parts = [*bytes_member(MANIFEST, json.dumps(manifest).encode(), 0)]
    target.write_bytes(b"".join([*parts, *bytes_member(DATABASE, database, 0), end()]))


def test_a_backup_holds_the_store_and_code_and_restores_into_a_new_home(tmp_path: Path) -> None:
    backup = tmp_path / "backup.tar"
    manifest = backed_up(tmp_path / "home", backup)
    assert manifest["jobs"] == 2 and manifest["shoalVersion"] == __version__
    (blob,) = manifest["blobs"]  # type: ignore[misc]
    assert blob["code"] and blob["jobCode"]
    assert manifest["schemaRevision"] == HEAD

    fresh = tmp_path / "fresh"
    done = restore(backup, fresh)
    assert done.kept_aside is None and done.blobs_added == 1
    assert (fresh / "blobs" / "sha256" / blob["sha256"]).read_bytes() == CODE
    assert (fresh / "blobs" / "code" / blob["sha256"]).exists()
    ctx = prepare(ServerSettings(home=fresh))  # a new admin token: the file was not there
    with TestClient(create_app(ctx, run_scheduler=False)) as api:
        api.headers["Authorization"] = f"Bearer {(fresh / 'admin.token').read_text().strip()}"
        names = sorted(job["name"] for job in api.get("/api/v1/jobs").json())
        assert names == ["coded", "plain"]
        code = api.get("/api/v1/agent/code/1", headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)})
        assert code.status_code == 200 and code.content == CODE


def test_a_newer_schema_is_refused_and_an_older_one_migrated_at_start(tmp_path: Path) -> None:
    backup = tmp_path / "backup.tar"
    backed_up(tmp_path / "home", backup)
    newer = tmp_path / "newer.tar"
    rewrite(backup, newer, "9999")
    target = tmp_path / "target"
    with pytest.raises(BackupError, match="schema revision 9999, newer than this shoal knows"):
        restore(newer, target)
    assert not (target / DATABASE).exists()

    older = tmp_path / "older.tar"
    backup_at(OLDER, older, tmp_path / "older.db")
    restore(older, target)
    prepare(ServerSettings(home=target)).db.dispose()  # migrated as the server starts
    with contextlib.closing(sqlite3.connect(target / DATABASE)) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == HEAD
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_cut_short_backup_is_refused(tmp_path: Path) -> None:
    backup = tmp_path / "backup.tar"
    backed_up(tmp_path / "home", backup)
    short = tmp_path / "short.tar"
    short.write_bytes(backup.read_bytes()[: backup.stat().st_size // 2])
    with pytest.raises(BackupError, match=r"short\.tar (is not a whole|is cut short)"):
        restore(short, tmp_path / "target")
    assert not (tmp_path / "target").exists()
