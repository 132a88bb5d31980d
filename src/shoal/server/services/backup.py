"""``GET /api/v1/admin/backup``: a consistent copy of the store while the server runs, with the
blobs a restored server needs (docs/backup.md; the file's layout: ``shoal.backup_archive``).

A SQLite store is copied with SQLite's online backup API in one step, so the copy is one read
transaction: every write committed before it began is in it, none after, and writers are not
held up (WAL). A PostgreSQL store is copied table by table (store/copy.py) into a new SQLite
file at the same schema head, every table read in one ``REPEATABLE READ, READ ONLY`` transaction:
one snapshot, so again every write committed before it began and none after, and no writer
waits. Either way the tar is the same, and restores onto either store. The copy goes to a
temporary file under ``blobs/tmp`` (removed when the answer ends, or at the next start), then
the tar is streamed from it and from the blob store, whose files never change once in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal import __version__
from shoal.backup_archive import (
    DATABASE,
    FORMAT,
    MANIFEST,
    bytes_member,
    end,
    file_member,
    sha256_of,
)
from shoal.server.context import ApiError, ServerContext
from shoal.server.services.blobs import SHA256_RE, BlobStore
from shoal.store.copy import copy_rows
from shoal.store.db import Database


@dataclass
class Snapshot:
    path: Path  # the database copy (temporary)
    manifest: dict[str, Any]
    files: list[tuple[str, Path, int]]  # member name, file, size (after the database)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def database_file(ctx: ServerContext) -> Path:
    """The SQLite store's file (an in-memory store has none to copy: 501)."""
    database = ctx.db.engine.url.database
    if not database or database == ":memory:":
        raise ApiError(
            501,
            "BackupUnsupported",
            "this server's store is an in-memory SQLite database: there is no file to back up; "
            "start the server on a store in its home (the default) or on PostgreSQL",
        )
    return Path(database)


def take(ctx: ServerContext) -> Snapshot:
    """Copy the database (one read transaction) and list what the tar will hold."""
    blobs = BlobStore(ctx.settings.blobs_dir)
    blobs.tmp.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=blobs.tmp, prefix="backup-", suffix=".db")
    os.close(fd)
    path = Path(name)
    try:
        if ctx.db.is_sqlite:
            _copy(database_file(ctx), path)
        else:
            _copy_snapshot(ctx.db, path)
        manifest, files = _describe(ctx, path, blobs)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Snapshot(path, manifest, files)


def stream(snapshot: Snapshot, now: float) -> Iterator[bytes]:
    """The tar, member by member; the database copy is removed at the end (or if cut short)."""
    try:
        yield from bytes_member(MANIFEST, json.dumps(snapshot.manifest, indent=1).encode(), now)
        size = snapshot.manifest["database"]["size"]
        yield from file_member(DATABASE, snapshot.path, size, now)
        for member, path, size in snapshot.files:
            yield from file_member(member, path, size, path.stat().st_mtime)
        yield end()
    finally:
        snapshot.discard()


def _copy(source: Path, target: Path) -> None:
    with (
        contextlib.closing(sqlite3.connect(source, timeout=30)) as reader,
        contextlib.closing(sqlite3.connect(target)) as copy,
    ):
        reader.backup(copy)  # all pages in one step: one consistent read transaction
        copy.execute("PRAGMA journal_mode=DELETE")  # one file: no -wal beside it in the tar
        if copy.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise ApiError(500, "BackupUnsound", "the copy of the database failed its check")


def _copy_snapshot(source: Database, target: Path) -> None:
    """Every row of the PostgreSQL store as one snapshot (one ``REPEATABLE READ``, read-only
    transaction) into a new SQLite file at the schema head."""
    copy = Database(f"sqlite:///{target}")
    try:
        with source.engine.connect() as connection:
            reading = connection.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            with reading.begin():
                copy_rows(reading, copy)
    finally:
        copy.dispose()
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute("PRAGMA journal_mode=DELETE")  # one file: no -wal beside it in the tar
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise ApiError(500, "BackupUnsound", "the copy of the database failed its check")


def _describe(
    ctx: ServerContext, copy: Path, blobs: BlobStore
) -> tuple[dict[str, Any], list[tuple[str, Path, int]]]:
    with contextlib.closing(sqlite3.connect(copy)) as db:
        revision = db.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        wanted = _blobs_referenced(db)
        legacy = [str(row[0]) for row in db.execute(_LEGACY_CODE)]
    files: list[tuple[str, Path, int]] = []
    listed, missing = [], []
    for sha256, kinds in sorted(wanted.items()):
        if not blobs.has(sha256):
            missing.append(sha256)  # named in the manifest; a restore says so
            continue
        size = blobs.path(sha256).stat().st_size
        listed.append({"sha256": sha256, "size": size, "code": blobs.is_code(sha256), **kinds})
        files.append((f"blobs/sha256/{sha256}", blobs.path(sha256), size))
    legacy_code = []
    for job in legacy:
        path = ctx.settings.code_dir / f"{job}.tar.gz"
        if path.is_file():
            with open(path, "rb") as handle:
                digest = sha256_of(handle)
            size = path.stat().st_size
            legacy_code.append({"job": job, "size": size, "sha256": digest})
            files.append((f"code/{job}.tar.gz", path, size))
    with open(copy, "rb") as handle:
        database = {"size": copy.stat().st_size, "sha256": sha256_of(handle)}
    manifest = {
        "format": FORMAT,
        "shoalVersion": __version__,
        "schemaRevision": revision,
        "createdAt": ctx.clock(),
        "jobs": jobs,
        "database": database,
        "blobs": listed,
        "missingBlobs": missing,
        "legacyCode": legacy_code,
    }
    return manifest, files


_LEGACY_CODE = "SELECT id FROM jobs WHERE has_code AND code_hash IS NULL"


def _blobs_referenced(db: sqlite3.Connection) -> dict[str, dict[str, bool]]:
    """sha256 -> what refers to it: jobs' code, data sets (named, or pinned by jobs), images."""
    found: dict[str, dict[str, bool]] = {}

    def note(sha256: object, kind: str) -> None:
        if isinstance(sha256, str) and SHA256_RE.match(sha256):
            found.setdefault(sha256, {})[kind] = True

    for (sha256,) in db.execute("SELECT DISTINCT code_hash FROM jobs WHERE code_hash IS NOT NULL"):
        note(sha256, "jobCode")
    for (sha256,) in db.execute("SELECT sha256 FROM data_sets"):
        note(sha256, "dataSet")
    for (pinned,) in db.execute("SELECT DISTINCT data_sets FROM jobs WHERE data_sets != '{}'"):
        for entry in (json.loads(pinned) or {}).values():
            note(entry.get("sha256") if isinstance(entry, dict) else None, "dataSet")
    for (sha256,) in db.execute("SELECT blob_sha256 FROM images"):
        note(sha256, "image")
    return found
