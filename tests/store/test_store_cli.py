"""`shoal server init --store` and `start --store` (docs/postgresql.md): a store shoal cannot use
or reach is refused in one line naming it, its password hidden, exit 1, nothing recorded; a
PostgreSQL store is migrated, gets the admin user, and is recorded (mode 0600) for `start`."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.server.app import prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import Database, home_store, store_url
from shoal.store.models import User


def shoal(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("mysql://u:sekret@h/db", "mysql is not a store shoal supports"),
        ("postgresql://u:sekret@127.0.0.1:1/db", "cannot open the store postgresql://u:***@"),
        ("postgresql://u:se@kret@127.0.0.1/db", "percent-encode an @ in the password as %40"),
        ("postgresql://u:sekret@127.0.0.1:port/db", "is not a database URL"),
    ],
)
def test_a_store_that_cannot_be_used_is_refused_naming_it(
    tmp_path: Path, store: str, said: str
) -> None:
    home = tmp_path / "home"
    code, out = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1",
                      "--store", store)  # fmt: skip
    assert code == 1, out
    assert said in " ".join(out.split()), out
    assert "sekret" not in out
    assert not (home / "store.url").exists()
    assert not (home / "pki").exists()  # checked before the CA is made


def test_init_with_a_postgresql_store_records_it_and_makes_the_admin_there(
    tmp_path: Path, pg_store: str
) -> None:
    home = tmp_path / "home"
    code, out = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1",
                      "--store", pg_store)  # fmt: skip
    assert code == 0, out
    recorded = home / "store.url"
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o600
    assert home_store(home) == store_url(pg_store)
    assert not (home / "shoal.db").exists()  # nothing in SQLite
    db = Database(home_store(home))
    try:
        with db.read() as session:
            assert session.scalars(select(User.name)).all() == ["admin"]
    finally:
        db.dispose()
    code, out = shoal("server", "init", "--home", str(home))  # again: the recorded store
    assert code == 0, out
    assert not (home / "shoal.db").exists()


def test_init_with_a_store_refuses_a_home_whose_cluster_is_elsewhere(
    tmp_path: Path, pg_store: str
) -> None:
    """A home with a SQLite cluster: `init --store` would start an empty one beside it."""
    home = tmp_path / "home"
    code, out = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1")
    assert code == 0, out
    token = (home / "admin.token").read_text()
    code, out = shoal("server", "init", "--home", str(home), "--store", pg_store)
    assert code == 1, out
    assert "move-store" in out
    assert not (home / "store.url").exists()
    assert (home / "admin.token").read_text() == token


def test_init_files_dir_puts_logs_and_blobs_there_and_refuses_to_move_them(
    tmp_path: Path,
) -> None:
    """`init --files-dir` (servers on one store share one): recorded in the home, used by every
    start (logs, blobs, old code archives), and never changed under files already written."""
    home, shared = tmp_path / "home", tmp_path / "shared"
    code, out = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1",
                      "--files-dir", str(shared))  # fmt: skip
    assert code == 0, out
    assert (home / "files.dir").read_text().strip() == str(shared.resolve())
    ctx = prepare(ServerSettings(home=home))
    try:
        assert ctx.settings.files_dir == shared.resolve()
        assert ctx.settings.logs_dir == shared.resolve() / "logs"
        assert ctx.settings.blobs_dir.parent == ctx.settings.code_dir.parent == shared.resolve()
    finally:
        ctx.db.dispose()
    code, out = shoal("server", "init", "--home", str(home), "--files-dir", str(shared))
    assert code == 0, out  # the same again: nothing to move
    code, out = shoal("server", "init", "--home", str(home), "--files-dir", str(tmp_path / "x"))
    assert code == 1 and "move logs/, blobs/ and code/ there" in " ".join(out.split()), out
    other = tmp_path / "other"
    (other / "logs").mkdir(parents=True)
    code, out = shoal("server", "init", "--home", str(other), "--files-dir", str(shared))
    assert code == 1 and "holds logs or blobs already" in " ".join(out.split()), out
    assert not (other / "files.dir").exists()


def test_a_shared_files_dir_keeps_another_servers_upload_under_way(tmp_path: Path) -> None:
    """Starting a server clears the uploads a previous run left; in a shared directory only
    those nobody wrote to for 10 minutes (another server may be receiving the others)."""
    shared = tmp_path / "shared"
    partial = shared / "blobs" / "tmp"
    partial.mkdir(parents=True)
    (partial / "upload-live").write_bytes(b"half")
    dead = partial / "upload-dead"
    dead.write_bytes(b"half")
    os.utime(dead, (time.time() - 3600, time.time() - 3600))
    prepare(ServerSettings(home=tmp_path / "home", files_dir=shared)).db.dispose()
    assert sorted(p.name for p in partial.iterdir()) == ["upload-live"]
