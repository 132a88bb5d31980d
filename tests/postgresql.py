"""A throwaway PostgreSQL cluster for the tests (docs/postgresql.md): Debian's server binaries,
``initdb`` as the ``postgres`` user into a fresh directory under /tmp, the postmaster on a free
loopback port (its socket in that directory), trust authentication, fsync off (the tests do not
survive power cuts; the store's durability is PostgreSQL's own). Each test gets a database of
its own; the cluster is stopped and its directory removed when the session ends, pass or fail.

``SHOAL_TEST_STORE=postgresql`` runs the server suite on it (tests/server/conftest.py).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shoal.local.supervisor import free_port

STORE_VARIABLE = "SHOAL_TEST_STORE"  # "postgresql": the server suite's stores are PostgreSQL
USER = "postgres"
SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200")


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (None: no server installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def unusable() -> str | None:
    """Why no throwaway cluster can be made here (None: it can)."""
    if binaries() is None:
        return "no PostgreSQL server (/usr/lib/postgresql/*/bin; `make system-deps` installs it)"
    if os.geteuid() != 0:
        return "initdb must run as the postgres user: the tests need root to switch to it"
    try:
        import psycopg  # noqa: F401, PLC0415
    except ModuleNotFoundError:
        return "no psycopg (pip install -e '.[postgresql]')"
    return None


@dataclass
class PgCluster:
    directory: Path
    port: int
    host: str = "127.0.0.1"  # the address its URLs name (start_cluster's also_listen_on)
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [str(binaries() / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", database, "-c", sql],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"psql {sql!r}: {done.stderr}"
        return done.stdout.strip()

    def new_database(self, prefix: str = "t") -> str:
        """A new empty database's URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def stop(self) -> None:
        """Stop the postmaster (fast, then by its pid) and remove the directory."""
        pid = self.postmaster_pid()
        subprocess.run(
            [str(binaries() / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            user=USER, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.05)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_cluster(
    durable: bool = False, also_listen_on: str | None = None, trusted_net: str | None = None
) -> PgCluster:
    """initdb and start; the directory is removed again if either fails. ``durable``: fsync
    and synchronous commits on, as a production server runs (benchmarks). ``also_listen_on``:
    an address to listen on besides 127.0.0.1 (e.g. a namespace lab's root-side address, for
    servers in the lab's hosts; the cluster's URLs then name it), and ``trusted_net``: the
    network (CIDR) whose clients it trusts there."""
    bin_dir = binaries()
    assert bin_dir is not None
    directory = Path(tempfile.mkdtemp(prefix="shoal-pg-"))
    shutil.chown(directory, USER, USER)
    cluster = PgCluster(directory, free_port(), host=also_listen_on or "127.0.0.1")
    listen = ",".join(["127.0.0.1", *([also_listen_on] if also_listen_on else [])])
    try:
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", USER, "--auth=trust",
             "-E", "UTF8", "--no-sync"],
            user=USER, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert init.returncode == 0, f"initdb: {init.stderr}"
        if trusted_net is not None:  # a throwaway cluster: trust, as initdb does for loopback
            with open(cluster.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {trusted_net} trust\n")
        options = " ".join(
            [f"-c listen_addresses={listen} -p {cluster.port} -k {cluster.data}"]
            + [f"-c {setting}" for setting in SETTINGS if not durable or "max_conn" in setting]
        )
        started = subprocess.run(
            [str(bin_dir / "pg_ctl"), "-D", str(cluster.data), "-o", options,
             "-l", str(directory / "log"), "-w", "-t", "60", "start"],
            user=USER, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        log = (directory / "log").read_text() if (directory / "log").exists() else ""
        assert started.returncode == 0, f"pg_ctl start: {started.stderr}\n{log}"
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_store(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh database's URL, dropped after the test."""
    url = pg_cluster.new_database()
    try:
        yield url
    finally:
        pg_cluster.drop_database(url)
