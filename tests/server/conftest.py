"""``SHOAL_TEST_STORE=postgresql`` (``make test-postgresql``): every server test's store is a
fresh PostgreSQL database of a throwaway cluster (tests/postgresql.py) instead of the SQLite
file in its home. The server resolves a home's store in one place (``home_store``, used by
``prepare``); tests that open a home's store themselves do it through ``sqlite_url``, which is
pointed at the same database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgresql import STORE_VARIABLE, PgCluster, pg_cluster  # noqa: F401 - a fixture

ON_POSTGRESQL = os.environ.get(STORE_VARIABLE) == "postgresql"


@pytest.fixture(autouse=True)
def _store_of_each_home(request: pytest.FixtureRequest) -> Iterator[None]:
    if not ON_POSTGRESQL or request.node.get_closest_marker("sqlite_only"):
        yield
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    made: dict[Path, str] = {}

    def store_of(home: Path) -> str:
        home = Path(home)
        if home not in made:
            made[home] = cluster.new_database()
        return made[home]

    patch = pytest.MonkeyPatch()
    patch.setattr("shoal.server.app.home_store", store_of)
    if hasattr(request.module, "sqlite_url"):
        patch.setattr(request.module, "sqlite_url", store_of)
    try:
        yield
    finally:
        patch.undo()
        for url in made.values():
            cluster.drop_database(url)
