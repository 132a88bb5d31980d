"""The database: SQLite (WAL) under ``$SHOAL_HOME`` by default, schema managed by Alembic."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'shoal.db'}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")  # a commit survives a crash and a power cut
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


class Database:
    """Engine, sessions and a process-wide write lock (SQLite has one writer at a time)."""

    def __init__(self, url: str) -> None:
        self.url = url
        is_sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10} if is_sqlite else {},
            pool_size=8 if not is_sqlite else 5,
        )
        if is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        # Derived data that never changes once written (e.g. a job's parsed spec), shared by every
        # session of this database as ``session.info["memo"]``.
        self.memo: dict[Any, Any] = {}
        self.sessions = sessionmaker(self.engine, expire_on_commit=False, info={"memo": self.memo})
        self._write_lock = threading.RLock()

    def migrate(self) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One serialised read-modify-write transaction, committed on success."""
        with self._write_lock, self.sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
