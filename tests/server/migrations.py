"""Stepping a store through its migrations by revision, for the tests of one migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config

from shoal.store.db import MIGRATIONS, Database, sqlite_url


class MigrationSteps:
    """A store in ``directory`` moved up or down to a revision on demand."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "shoal.db"
        self.db = Database(sqlite_url(directory))
        self.config = Config()
        self.config.set_main_option("script_location", str(MIGRATIONS))

    def migrate(self, step: str, revision: str) -> None:
        with self.db.engine.begin() as connection:
            self.config.attributes["connection"] = connection
            getattr(command, step)(self.config, revision)

    def tables(self) -> set[str]:
        with sqlite3.connect(self.path) as raw:
            return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def close(self) -> None:
        self.db.dispose()
