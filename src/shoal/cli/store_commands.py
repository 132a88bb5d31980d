"""`shoal server move-store`: a cluster's state moved to another store, the server stopped
(docs/postgresql.md, "Move a SQLite cluster to PostgreSQL")."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from shoal.cli.common import fail
from shoal.cli.render import console
from shoal.paths import default_home


def move_store(
    to: str = typer.Option(
        ..., "--to", help="postgresql://USER:PASSWORD@HOST:PORT/DB: an empty database."
    ),
    home: Path = typer.Option(None, "--home", help="The server's home (default $SHOAL_HOME)."),
) -> None:
    """Copy the server's whole state (jobs, users, tokens, nodes, VCs...) into an empty store
    and make it the home's store. Stop the server first; the old store is left as it was."""
    from shoal.cli.server_commands import _checked_store
    from shoal.store.copy import TargetNotEmpty, copy_store
    from shoal.store.db import Database, home_store, record_store, safe_url

    home = (home or default_home()).expanduser().resolve()
    if not (home / "admin.token").exists():
        raise fail(f"{home} is not a server's home (no admin.token): give it with --home")
    _refuse_running(home)
    source_url, target_url = home_store(home), _checked_store(to, reach=True)
    if safe_url(source_url) == safe_url(target_url):
        raise fail(f"--to {safe_url(target_url)} is the store {home} uses already")
    source, target = Database(source_url), Database(target_url)
    try:
        copied = copy_store(source, target)
    except TargetNotEmpty as exc:
        raise fail(f"--to {safe_url(target_url)}: {exc}") from None
    finally:
        source.dispose()
        target.dispose()
    record_store(home, target_url)
    busiest = sorted(copied.tables.items(), key=lambda item: -item[1])[:4]
    console.print(
        f"copied {copied.rows} rows ({', '.join(f'{n} {t}' for t, n in busiest)}, ...) from "
        f"{safe_url(source_url)} to {safe_url(target_url)}",
        markup=False,
        highlight=False,
    )
    console.print(
        f"the home {home} now uses {safe_url(target_url)} (in {home / 'store.url'}); the old "
        "store is left as it was. Start the server as before.",
        markup=False,
        highlight=False,
    )


def _refuse_running(home: Path) -> None:
    """A server of this home still running would go on writing to the old store."""
    import psutil

    try:
        pid = int(json.loads((home / "server.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    try:
        running = "shoal" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return
    if running:
        raise fail(f"the server of {home} is running (pid {pid}): stop it first")
