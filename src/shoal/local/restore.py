"""``shoal admin restore FILE --home H``: put a backup in place of a stopped server's store
(docs/backup.md).

Everything is checked before anything changes: no server uses the home (its pid files and the
scheduler's lock), the file is a whole backup (``backup_archive.verify``: every member's sha256),
its database passes ``PRAGMA integrity_check``, and its schema is one this shoal knows (an older
one is migrated when the server next starts; a newer one is refused). Then the store in place
is kept aside as ``shoal.db.before-restore-<time>`` (with its ``-wal``/``-shm``), the backup's
database takes its place, its blobs are added to the blob store, and the logs of jobs the backup
does not have are moved aside (job ids after the backup's are issued again).

A home whose store is PostgreSQL (``HOME/store.url``, docs/postgresql.md) gets the backup's rows
loaded into that database instead, in one transaction (store/copy.py ``copy_rows``), after the
backup's database is migrated to the schema head. The database must be empty, or hold this
home's cluster (the home's admin or agent token is in it, or it shares a token with the backup),
or the user gives ``--force``; no server on any host may hold its scheduler lease. Rows it held
are first copied to ``shoal.db.before-restore-<time>`` (a SQLite store) in the home.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Table, exists, inspect, select, text
from sqlalchemy.exc import DBAPIError, OperationalError

from shoal.backup_archive import DATABASE, BackupError, Manifest, verify
from shoal.store.copy import copied_tables, copy_rows
from shoal.store.db import (
    MIGRATIONS,
    Database,
    home_store,
    open_problem,
    recorded_files_dir,
    safe_url,
    store_url,
)
from shoal.store.models import SchedulerLeaseRow, Token

SCHEDULER_LOCK = "scheduler.lock"  # held by a running server's scheduler (scheduler_main.py)


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    kept_aside: Path | None  # the database that was replaced
    logs_aside: Path | None  # logs of jobs the backup does not have
    blobs_added: int


def restore(backup: Path, home: Path, force: bool = False) -> Restored:
    """Raises ``BackupError`` (nothing changed) when the home is in use or the file unsound,
    or (without ``force``) when the home's PostgreSQL store holds another cluster."""
    refuse_if_running(home)
    manifest = verify(backup)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    url = store_url(home_store(home))
    if not url.startswith("sqlite"):
        return _restore_into_database(backup, manifest, home, url, force)
    incoming = home / f"{DATABASE}.restoring"
    try:
        _extract(backup, DATABASE, incoming)
        _check_database(incoming, manifest, backup)
        refuse_if_running(home)  # once more, just before the switch
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = _set_aside(home / DATABASE, stamp)
        os.replace(incoming, home / DATABASE)
    finally:
        incoming.unlink(missing_ok=True)
    added = _add_files(backup, manifest, home)
    logs = _logs_aside(home, _job_ids(home / DATABASE), stamp)
    return Restored(manifest, kept, logs, added)


def refuse_if_running(home: Path) -> None:
    for name in ("run.json", "server.json"):
        pid = _pid_in(home / name)
        if pid is not None and _alive(pid):
            raise BackupError(
                f"a server uses {home} (pid {pid}, {home / name}): stop it first "
                f"(`shoal down` or end `shoal server`), then restore"
            )
    lock = home / SCHEDULER_LOCK
    if not lock.exists():
        return
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise BackupError(
            f"a server's scheduler holds {lock}: a server uses {home}; stop it first"
        ) from None
    finally:
        os.close(fd)  # closing releases the lock


def _pid_in(path: Path) -> int | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = data.get("server_pid", data.get("pid")) if isinstance(data, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _extract(backup: Path, member: str, target: Path) -> None:
    with tarfile.open(backup, "r:") as archive:
        source = archive.extractfile(member)
        if source is None:
            raise BackupError(f"{backup} has no {member}")
        with open(target, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())


def _check_database(path: Path, manifest: Manifest, backup: Path) -> None:
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
            revision = db.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise BackupError(f"{backup}: its database cannot be read ({exc})") from None
    if verdict != "ok":
        raise BackupError(f"{backup}: its database fails PRAGMA integrity_check: {verdict}")
    if revision != manifest.revision:
        raise BackupError(f"{backup}: its database is at {revision}, its manifest says otherwise")
    if revision not in _known_revisions():
        raise BackupError(
            f"{backup} was made by shoal {manifest.data['shoalVersion']} with schema revision "
            f"{revision}, newer than this shoal knows: restore it with that version or newer"
        )


def _set_aside(database: Path, stamp: str) -> Path | None:
    if not database.exists():
        return None
    kept = database.with_name(f"{database.name}.before-restore-{stamp}")
    for suffix in ("-wal", "-shm", ""):  # SQLite finds the WAL by the database's name
        part = database.with_name(database.name + suffix)
        if part.exists():
            os.replace(part, kept.with_name(kept.name + suffix))
    return kept


def _files(home: Path) -> Path:
    """Where the server of ``home`` keeps logs and blobs (``shoal server init --files-dir``)."""
    return recorded_files_dir(home) or home


def _add_files(backup: Path, manifest: Manifest, home: Path) -> int:
    """Blobs (content-addressed: one already there is the same) and old jobs' code archives."""
    home = _files(home)
    code = {b["sha256"] for b in manifest.data["blobs"] if b.get("code")}
    added = 0
    with tarfile.open(backup, "r:") as archive:
        for member in archive:
            if member.name.startswith("blobs/sha256/") or member.name.startswith("code/"):
                target = home / "blobs" / member.name[len("blobs/") :]
                if member.name.startswith("code/"):
                    target = home / member.name
                if not target.exists():
                    _write_member(archive, member, target)
                    added += 1
    for sha256 in code:
        marker = home / "blobs" / "code" / sha256
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return added


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = archive.extractfile(member)
    assert source is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".restoring")
    with open(partial, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, target)


def _restore_into_database(
    backup: Path, manifest: Manifest, home: Path, url: str, force: bool
) -> Restored:
    """The backup's rows in place of the PostgreSQL store's, in one transaction."""
    incoming = home / f"{DATABASE}.restoring"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    source, target = Database(f"sqlite:///{incoming}"), Database(url)
    try:
        _extract(backup, DATABASE, incoming)
        _check_database(incoming, manifest, backup)
        held = _check_target(target, home, incoming, force)
        source.migrate()  # an older backup is brought to this shoal's head first
        refuse_if_running(home)  # once more, just before the switch
        kept = _keep_aside(target, home / f"{DATABASE}.before-restore-{stamp}") if held else None
        _load(source, target, kept, backup)
        kept_jobs = _job_ids(incoming)
    except Exception as exc:
        problem = open_problem(url, exc)
        if problem is None:
            raise
        raise BackupError(problem, "StoreUnreachable") from None
    finally:
        source.dispose()
        target.dispose()
        for suffix in ("", "-wal", "-shm", ".write-lock"):
            incoming.with_name(incoming.name + suffix).unlink(missing_ok=True)
    added = _add_files(backup, manifest, home)
    logs = _logs_aside(home, kept_jobs, stamp)
    return Restored(manifest, kept, logs, added)


def _load(source: Database, target: Database, kept: Path | None, backup: Path) -> None:
    """The backup's rows in place of the store's, in one transaction: a row the store cannot
    take (PostgreSQL enforces column lengths SQLite ignores) rolls the whole load back."""
    try:
        with source.engine.connect() as reading:
            copy_rows(reading, target, replace=True)
    except DBAPIError as exc:
        for suffix in ("", "-wal", "-shm"):
            if kept is not None:
                kept.with_name(kept.name + suffix).unlink(missing_ok=True)
        if isinstance(exc, OperationalError):
            raise  # the store went away: said as such (``open_problem``)
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise BackupError(
            f"the store {safe_url(target.url)} refused a row of {backup} ({reason}); the load was "
            "rolled back whole and the database holds what it held: restore it into a SQLite "
            "home (one without store.url), shorten that value there with the server's API, "
            "then `shoal server move-store` it here",
            "RestoreLoadFailed",
        ) from None


def _check_target(target: Database, home: Path, incoming: Path, force: bool) -> bool:
    """Refuse a store a server uses, of a newer schema, or holding another cluster (unless
    ``force``). True if it holds rows (they are kept aside before they are replaced)."""
    where = safe_url(target.url)
    with target.engine.connect() as connection:
        names = set(inspect(connection).get_table_names())
        if "alembic_version" not in names:
            return False  # an empty database: the migrations make the schema
        revision = connection.scalar(text(_VERSION))
        if revision not in _known_revisions():
            raise BackupError(
                f"the store {where} is at schema revision {revision}, newer than this shoal "
                "knows: restore with the shoal that serves it, or into an empty database",
                "StoreSchemaNewer",
            )
        _refuse_a_leader(connection, names, where)
        held = [t.name for t in copied_tables() if t.name in names and _has_rows(connection, t)]
        if held and not force and not _same_cluster(connection, home, incoming):
            raise BackupError(
                f"the store {where} (HOME/store.url of {home}) holds another cluster's data "
                f"(rows in {', '.join(held[:4])}; neither {home}'s admin.token nor a token of "
                "the backup is among its tokens): restore into an empty database (createdb a "
                "new one and `shoal server move-store` or `init --store` to it), or give --force "
                f"to replace its data (kept first as {home}/{DATABASE}.before-restore-<time>)",
                "StoreHoldsAnotherCluster",
            )
    return bool(held)


_VERSION = "SELECT version_num FROM alembic_version"


def _known_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}


def _has_rows(connection: Connection, table: Table) -> bool:
    return bool(connection.scalar(select(exists().select_from(table))))


def _refuse_a_leader(connection: Connection, names: set[str], where: str) -> None:
    """A server on another host (or home) sharing this store still holds its scheduler lease."""
    if SchedulerLeaseRow.__tablename__ not in names:
        return
    lease = SchedulerLeaseRow.__table__
    row = connection.execute(
        select(lease.c.holder, lease.c.expires_at).where(lease.c.expires_at > time.time())
    ).first()
    if row is not None:
        raise BackupError(
            f"a server uses the store {where}: {row.holder} holds its scheduler lease; stop "
            "every server on this store (on every host), then restore",
            "StoreInUse",
        )


def _same_cluster(connection: Connection, home: Path, incoming: Path) -> bool:
    """The store holds this home's token (admin or agent), or a token the backup holds."""
    hashes = set()
    for name in ("admin.token", "agent.token"):
        with contextlib.suppress(OSError):
            hashes.add(hashlib.sha256((home / name).read_text().strip().encode()).hexdigest())
    with contextlib.closing(sqlite3.connect(incoming)) as db:
        hashes |= {str(row[0]) for row in db.execute("SELECT token_hash FROM tokens")}
    column = Token.__table__.c.token_hash
    found = connection.scalar(select(exists().where(column.in_(sorted(hashes)))))
    return bool(hashes) and bool(found)


def _keep_aside(target: Database, kept: Path) -> Path:
    """The rows the store holds, copied into a new SQLite store ``kept`` (at the schema head)."""
    target.migrate()
    copy = Database(f"sqlite:///{kept}")
    try:
        try:
            with target.engine.connect() as reading, reading.begin():
                copy_rows(reading, copy)
        finally:
            copy.dispose()
        with contextlib.closing(sqlite3.connect(kept)) as db:
            db.execute("PRAGMA journal_mode=DELETE")  # one file, as a backup's database
    except BaseException:
        for suffix in ("", "-wal", "-shm"):
            kept.with_name(kept.name + suffix).unlink(missing_ok=True)
        raise
    return kept


def _job_ids(database: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return {str(row[0]) for row in db.execute("SELECT id FROM jobs")}


def _logs_aside(home: Path, kept_jobs: set[str], stamp: str) -> Path | None:
    """Move the log directories of jobs the backup does not have out of ``logs/``: a job given
    the same id after the restore must not find them."""
    home = _files(home)
    logs = home / "logs"
    strays = [p for p in logs.iterdir() if p.name not in kept_jobs] if logs.is_dir() else []
    if not strays:
        return None
    aside = home / f"logs.before-restore-{stamp}"
    aside.mkdir(exist_ok=True)
    for stray in strays:
        os.replace(stray, aside / stray.name)
    return aside
