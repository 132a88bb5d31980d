"""`shoal server init --store` and `start --store` (docs/postgresql.md): a store shoal cannot use
or reach is refused in one line naming it, its password hidden, exit 1, nothing recorded; a
PostgreSQL store is migrated, gets the admin user, and is recorded (mode 0600) for `start`."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from shoal.cli.main import app
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
