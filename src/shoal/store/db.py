"""The database: SQLite (WAL) under ``$SHOAL_HOME`` by default, schema managed by Alembic."""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")
# ``revision = "0028"`` and ``down_revision = "0027"`` (or None) in a migration file
_REVISION_LINE = re.compile(r'^(down_)?revision\b[^=\n]*=\s*(?:"(\w+)"|None)\s*$', re.MULTILINE)


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'shoal.db'}"


def _sqlite_file(url: str) -> Path | None:
    """The database file of a file-backed SQLite URL (None: another database, or in memory)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix) :] in ("", ":memory:"):
        return None
    return Path(url[len(prefix) :])


class WriteLock:
    """Writers one at a time, across this process's threads and across processes on one SQLite
    file (the API server and its scheduler process, server/scheduler_process.py).

    A thread lock orders this process's writers; an ``flock`` on ``<database>.write-lock``
    orders the processes. A blocked writer wakes as soon as the lock is released, where SQLite's
    own busy handler would sleep and poll (up to 100 ms per try). Re-entrant per thread: a write
    begun inside another write keeps the file lock until the outer one ends."""

    def __init__(self, database: Path | None) -> None:
        self._thread_lock = threading.RLock()
        self._depth = 0  # nesting of the thread holding ``_thread_lock``
        self._path = None if database is None else database.with_name(database.name + ".write-lock")
        self._fd: int | None = None
        self._pid = 0  # the process that opened ``_fd`` (a forked child opens its own)

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        try:
            if self._depth == 0 and self._path is not None:
                fcntl.flock(self._file(), fcntl.LOCK_EX)  # releases the GIL while it waits
            self._depth += 1
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _file(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            assert self._path is not None
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")  # a commit survives a crash and a power cut
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


class Database:
    """Engine, sessions and a write lock (SQLite has one writer at a time; see ``WriteLock``)."""

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
        self._write_lock = WriteLock(_sqlite_file(url))

    def migrate(self) -> None:
        """Bring the schema up to the newest migration. A store already there is left alone
        without importing Alembic (and Mako and Pygments: 10 MiB a server would keep)."""
        if self._at_head():
            return
        from alembic import command  # noqa: PLC0415 - imported only when there is work
        from alembic.config import Config  # noqa: PLC0415

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def _at_head(self) -> bool:
        """True if the store's revision is the only head of the migration files; False when
        unsure (a merge, a file not read as expected, no revision table): Alembic decides."""
        revisions: set[str] = set()
        parents: set[str] = set()
        for path in (MIGRATIONS / "versions").glob("*.py"):
            lines = _REVISION_LINE.finditer(path.read_text())
            found = {m.group(1) or "": m.group(2) for m in lines}
            if "" not in found or "down_" not in found or found[""] is None:
                return False
            revisions.add(found[""])
            parents.add(found["down_"] or "")
        heads = revisions - parents
        try:
            with self.engine.connect() as connection:
                stored = connection.execute(text("SELECT version_num FROM alembic_version"))
                return len(heads) == 1 and set(stored.scalars()) == heads
        except DBAPIError:  # a new store: no table yet
            return False

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
        self._write_lock.close()
