"""The database: SQLite (WAL) under ``$SHOAL_HOME`` by default, or PostgreSQL
(``--store postgresql://...``, docs/postgresql.md); schema managed by Alembic on both."""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")
# ``revision = "0028"`` and ``down_revision = "0027"`` (or None) in a migration file
_REVISION_LINE = re.compile(r'^(down_)?revision\b[^=\n]*=\s*(?:"(\w+)"|None)\s*$', re.MULTILINE)


# Every writer of a PostgreSQL store, in any process on any host, takes this transaction-level
# advisory lock first: writes are serialised as on SQLite, so the change feed's sequence numbers
# commit in order (server/model.py reads ``seq > last``) and read-modify-writes stay exact.
WRITE_LOCK_KEY = 0x5A0A1  # "shoal", as a bigint; any constant no other application uses


class StoreUrlError(ValueError):
    """A --store value that is not a database shoal can use."""


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'shoal.db'}"


def store_url(url: str) -> str:
    """``url`` as SQLAlchemy's URL for its driver: ``postgresql://`` and ``postgres://`` use
    psycopg 3 (the ``postgresql`` extra). A value that is neither SQLite nor PostgreSQL is a
    ``StoreUrlError`` saying what is accepted."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 - a port that is not a number raises here
    except (ArgumentError, ValueError):
        shown = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)  # no password, even unparsed
        raise StoreUrlError(
            f"--store {shown!r} is not a database URL: use "
            "postgresql://USER:PASSWORD@HOST:PORT/DB or sqlite:///PATH"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return url
    if backend in ("postgresql", "postgres"):
        if "@" in (parsed.host or ""):
            raise StoreUrlError(
                "--store: the URL has more than one @: percent-encode an @ in the password as %40"
            )
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    raise StoreUrlError(
        f"--store {safe_url(url)}: {backend} is not a store shoal supports; use "
        "postgresql://... or sqlite:///PATH"
    )


STORE_FILE = "store.url"  # in the server's home: the store `shoal server init --store` chose


def home_store(home: Path) -> str:
    """The store of the server whose home is ``home``: the URL ``shoal server init --store``
    recorded there, else the SQLite file in it."""
    recorded = home / STORE_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    return sqlite_url(home)


def record_store(home: Path, url: str) -> None:
    """Remember ``url`` as ``home``'s store (mode 0600: it may hold a password)."""
    path = home / STORE_FILE
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(url + "\n")
    os.replace(partial, path)


FILES_FILE = "files.dir"  # in the home: the files directory `shoal server init --files-dir` set


def recorded_files_dir(home: Path) -> Path | None:
    """Where the server of ``home`` keeps task logs and blobs, if not in the home: a directory
    several servers on one store share (docs/postgresql.md, "Several servers")."""
    path = home / FILES_FILE
    return Path(path.read_text().strip()) if path.is_file() else None


def record_files_dir(home: Path, files_dir: Path) -> None:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / FILES_FILE).write_text(f"{files_dir}\n")


def open_problem(url: str, exc: BaseException) -> str | None:
    """What a user is told when the store at ``url`` cannot be opened (None: not such a
    problem, let it rise): the driver is not installed, or the server refused or is not there."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "psycopg":
        return (
            f"the store {safe_url(url)} needs the PostgreSQL driver: "
            "pip install 'shoal[postgresql]'"
        )
    if isinstance(exc, OperationalError) and not url.startswith("sqlite"):  # refused, unknown
        # host or database, bad password (SQLite's own errors keep their traceback)
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        return f"cannot open the store {safe_url(url)}: {reason}"
    return None


def safe_url(url: str) -> str:
    """``url`` as users write it (no driver name), its password hidden: for logs and messages."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql+psycopg":
        parsed = parsed.set(drivername="postgresql")
    return parsed.render_as_string(hide_password=True)


def check_reachable(url: str) -> str | None:
    """Open one connection to the store at ``url`` and close it: None if that worked, else what
    ``open_problem`` says (a problem of another kind rises)."""
    try:
        engine = create_engine(store_url(url))
        try:
            with engine.connect():
                return None
        finally:
            engine.dispose()
    except Exception as exc:
        problem = open_problem(url, exc)
        if problem is None:
            raise
        return problem


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

    @property
    def nested(self) -> bool:
        """True inside a write begun within another write of this thread."""
        return self._depth > 1

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


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Each connection's settings (no I/O: a server opens connections beyond its pool's size
    under load; the journal mode is the file's, set once by ``Database``)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=FULL")  # a commit survives a crash and a power cut
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


_PG_WRITE_LOCK = text(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")
_PG_MIGRATE_LOCK = text(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY + 1})")
_SQLITE_BEGIN = text("BEGIN")
_SQLITE_CONNECT = {"check_same_thread": False, "timeout": 10}
# A writer that stops (SIGSTOP, a frozen VM, a cut network) must not hold every server's write
# lock for ever: PostgreSQL ends a session idle in its transaction after 30 s (its lock goes
# with it), and TCP keepalives find a peer that vanished within about 25 s.
PG_CONNECT_ARGS: dict[str, Any] = {
    "options": "-c idle_in_transaction_session_timeout=30000",
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


class Database:
    """Engine, sessions and a write lock: one writer at a time (``WriteLock`` on SQLite's file;
    on PostgreSQL, the thread lock and an advisory lock held by the write's transaction)."""

    def __init__(self, url: str) -> None:
        self.url = url = store_url(url)
        self.is_sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(
            url,
            connect_args=_SQLITE_CONNECT if self.is_sqlite else PG_CONNECT_ARGS,
            # SQLite: enough for the API's worker threads (40) to seldom open one beyond it
            pool_size=16 if self.is_sqlite else 8,
            pool_pre_ping=not self.is_sqlite,  # a restarted PostgreSQL: reconnect, not fail once
        )
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "first_connect", _sqlite_wal)  # the file's: it persists
        # Derived data that never changes once written (e.g. a job's parsed spec), shared by every
        # session of this database as ``session.info["memo"]``.
        self.memo: dict[Any, Any] = {}
        self.sessions = sessionmaker(self.engine, expire_on_commit=False, info={"memo": self.memo})
        self._write_lock = WriteLock(_sqlite_file(url))
        # write transactions this process committed that may have changed what readers see (the
        # quiet reports' answers kept in memory are good until it moves; a heartbeat's write
        # is not counted: server/services/quiet_answers.py)
        self.changes_committed = 0  # a number never used before, after each such commit
        self._change_numbers = itertools.count(1)

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
            if not self.is_sqlite:  # servers starting together: one migrates, the others wait
                connection.execute(_PG_MIGRATE_LOCK)  # then find the head reached (Alembic reads
            config.attributes["connection"] = connection  # the version after the lock)
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
    def snapshot(self) -> Iterator[Session]:
        """A read whose statements all see one state of the store, whatever commits meanwhile
        (``REPEATABLE READ`` on PostgreSQL; one deferred transaction on SQLite, whose driver
        would otherwise read each statement at its own moment)."""
        with self.sessions() as session:
            if self.is_sqlite:
                session.execute(_SQLITE_BEGIN)
            else:
                options = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
                session.connection(execution_options=options)
            yield session

    @contextmanager
    def write(self, counted: bool = True) -> Iterator[Session]:
        """One serialised read-modify-write transaction, committed on success; ``counted``
        False: it changes nothing a reader of the store acts on (``changes_committed``)."""
        with self._write_lock, self.sessions() as session, session.begin():
            if not self.is_sqlite and not self._write_lock.nested:  # the outer one holds it
                session.execute(_PG_WRITE_LOCK)
            yield session
        if counted:  # after the commit; unique, so two writers' numbers never cancel out
            self.changes_committed = next(self._change_numbers)

    def dispose(self) -> None:
        self.engine.dispose()
        self._write_lock.close()
