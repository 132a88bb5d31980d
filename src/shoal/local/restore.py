"""``shoal admin restore FILE --home H``: put a backup in place of a stopped server's store
(docs/backup.md).

Everything is checked before anything changes: no server uses the home (its pid files and the
scheduler's lock), the file is a whole backup (``backup_archive.verify``: every member's sha256),
its database passes ``PRAGMA integrity_check``, and its schema is one this shoal knows (an older
one is migrated when the server next starts; a newer one is refused). Then the store in place
is kept aside as ``shoal.db.before-restore-<time>`` (with its ``-wal``/``-shm``), the backup's
database takes its place, its blobs are added to the blob store, and the logs of jobs the backup
does not have are moved aside (job ids after the backup's are issued again).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory

from shoal.backup_archive import DATABASE, BackupError, Manifest, verify
from shoal.store.db import MIGRATIONS

SCHEDULER_LOCK = "scheduler.lock"  # held by a running server's scheduler (scheduler_main.py)


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    kept_aside: Path | None  # the database that was replaced
    logs_aside: Path | None  # logs of jobs the backup does not have
    blobs_added: int


def restore(backup: Path, home: Path) -> Restored:
    """Raises ``BackupError`` (nothing changed) when the home is in use or the file unsound."""
    refuse_if_running(home)
    manifest = verify(backup)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    known = {script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}
    if revision not in known:
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


def _add_files(backup: Path, manifest: Manifest, home: Path) -> int:
    """Blobs (content-addressed: one already there is the same) and old jobs' code archives."""
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


def _job_ids(database: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return {str(row[0]) for row in db.execute("SELECT id FROM jobs")}


def _logs_aside(home: Path, kept_jobs: set[str], stamp: str) -> Path | None:
    """Move the log directories of jobs the backup does not have out of ``logs/``: a job given
    the same id after the restore must not find them."""
    logs = home / "logs"
    strays = [p for p in logs.iterdir() if p.name not in kept_jobs] if logs.is_dir() else []
    if not strays:
        return None
    aside = home / f"logs.before-restore-{stamp}"
    aside.mkdir(exist_ok=True)
    for stray in strays:
        os.replace(stray, aside / stray.name)
    return aside
