"""The store's tests use the throwaway PostgreSQL cluster's fixtures (tests/postgresql.py), and
none of the user's shoal settings (its CLI tests run the CLI in this process)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.server.app import prepare
from shoal.server.context import ServerContext
from shoal.server.settings import ServerSettings
from tests.envs import is_user_setting
from tests.postgresql import pg_cluster, pg_store  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if is_user_setting(k)]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SHOAL_CONFIG", str(tmp_path / "config.yaml"))


@pytest.fixture
def servers(
    pg_store: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> Iterator[tuple[ServerContext, ServerContext]]:
    """Two servers' contexts, each with its own home, on one PostgreSQL database."""
    made = [
        prepare(ServerSettings(home=tmp_path / name, database_url=pg_store, scheduler="thread"))
        for name in ("a", "b")
    ]
    try:
        yield made[0], made[1]
    finally:
        for ctx in made:
            ctx.db.dispose()
