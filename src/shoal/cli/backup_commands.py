"""``shoal admin backup FILE`` and ``shoal admin restore FILE`` (docs/backup.md).

``backup`` is a client: the server makes the copy (SQLite's online backup, or one snapshot of
PostgreSQL copied into a SQLite file) and streams it; the file is written beside FILE, checked
whole, then renamed into place. ``restore`` works on a stopped server's home on this machine
(its SQLite file, or the PostgreSQL database of ``HOME/store.url``); it loads what it needs (the
store's code) only when it runs, as the CLI is a client (tests/cli/test_cli_imports.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer

from shoal.backup_archive import BackupError, verify
from shoal.cli.common import api_errors, client, fail
from shoal.cli.render import console
from shoal.paths import default_home

BACKUP_ROUTE = "/api/v1/admin/backup"


@api_errors
def backup(
    file: Path = typer.Argument(..., help="Where to write the backup (a tar)."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
) -> None:
    """Back up the server's store while it runs (admins): jobs, users, VCs, tokens and the code
    archives, data sets and images they refer to; not task logs (docs/backup.md)."""
    if file.exists() and not force:
        raise fail(f"{file} exists; give --force to replace it, or another name")
    fd, name = tempfile.mkstemp(dir=file.parent if str(file.parent) else ".", prefix=".shoal-")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as sink:
            client()._download(BACKUP_ROUTE, sink)  # streamed to disk, never held in memory
            sink.flush()
            os.fsync(sink.fileno())
        manifest = verify(partial)
        os.chmod(partial, 0o600)  # it holds the store: password and token hashes
        os.replace(partial, file)
    except BackupError as exc:
        raise fail(f"the backup was not kept: {exc}; run it again") from None
    finally:
        partial.unlink(missing_ok=True)
    data = manifest.data
    console.print(
        f"backed up {data['jobs']} jobs and {len(data['blobs'])} blobs (schema "
        f"{data['schemaRevision']}, shoal {data['shoalVersion']}) to {file} "
        f"({file.stat().st_size / 1e6:.1f} MB)",
        markup=False,
    )
    if data["missingBlobs"]:
        console.print(
            f"note: {len(data['missingBlobs'])} blobs the store names were not on the server",
            markup=False,
        )


def restore(
    file: Path = typer.Argument(..., help="A file `shoal admin backup` wrote."),
    home: Path = typer.Option(
        None, "--home", help="The stopped server's state directory (default $SHOAL_HOME)."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace the data of a PostgreSQL store that holds another cluster (kept aside).",
    ),
) -> None:
    """Replace a stopped server's store with a backup (the old one is kept aside): the SQLite
    file in HOME, or the PostgreSQL database of HOME/store.url. Checks the file whole first; a
    backup from an older shoal is migrated (on PostgreSQL as it is loaded, else when the server
    starts)."""
    from shoal.local.restore import restore as restore_home  # the store's code: only here

    where = home or default_home()
    try:
        done = restore_home(file, where, force=force)
    except BackupError as exc:
        code = f" ({exc.code})" if exc.code else ""
        raise fail(f"{exc}{code}; nothing was changed") from None
    data = done.manifest.data
    console.print(
        f"restored {data['jobs']} jobs (schema {data['schemaRevision']}, shoal "
        f"{data['shoalVersion']}) into {where}; {done.blobs_added} blobs added",
        markup=False,
    )
    if done.kept_aside is not None:
        console.print(f"the store it replaced is kept as {done.kept_aside}", markup=False)
    if done.logs_aside is not None:
        console.print(f"logs of jobs not in the backup moved to {done.logs_aside}", markup=False)
    console.print("start the server: it migrates an older schema as it starts", markup=False)
