"""PostgreSQL as the store (docs/postgresql.md), on a throwaway cluster (tests/postgresql.py):
the same migrations reach the same head, the change feed's triggers and counter work, writers
from two connections take turns, and the server runs on it end to end (submit, schedule,
report, list)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import inspect, select, text

from shoal.server.app import create_app, prepare
from shoal.server.services.live import ChangeWatch
from shoal.server.settings import ServerSettings
from shoal.store.db import MIGRATIONS, Database, StoreUrlError, store_url
from shoal.store.models import Base, DataSetRow, SchedChange, VirtualClusterRow
from tests.server.test_api import JOB, register_node

LONGEST_NODE_NAME = ".".join(["n" * 63] * 3) + "." + "n" * 61  # 253: a DNS subdomain
WATCHED = ("jobs", "tasks", "nodes", "virtual_clusters")


def test_the_migrations_make_every_table_and_the_change_feeds_triggers(pg_store: str) -> None:
    db = Database(pg_store)
    try:
        db.migrate()
        tables = set(inspect(db.engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        with db.read() as session:
            triggers = set(
                session.execute(
                    text("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'sched_%'")
                ).scalars()
            )
        wanted = {f"sched_{t}_{w}" for t in WATCHED for w in ("insert", "update", "delete")}
        assert triggers == wanted | {"sched_changes_notice"}  # 0032: NOTIFY the other servers
        db.migrate()  # at head: nothing to do
    finally:
        db.dispose()


def _widths_and_triggers(db: Database) -> tuple[dict[str, int], set[str]]:
    with db.read() as session:
        widths = session.execute(
            text(
                "SELECT table_name, character_maximum_length FROM information_schema.columns "
                "WHERE (table_name, column_name) IN (('nodes', 'name'), ('tasks', 'node'), "
                "('node_events', 'node'), ('node_certs', 'node'), ('exec_sessions', 'node'), "
                "('cloud_instances', 'node'))"
            )
        ).all()
        triggers = set(session.execute(text("SELECT tgname FROM pg_trigger")).scalars())
    return {str(row[0]): int(row[1]) for row in widths}, triggers


def test_migration_0034_widens_every_node_name_column_and_keeps_the_triggers(
    pg_store: str,
) -> None:
    db = Database(pg_store)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))

    def migrate(step: str, revision: str) -> None:
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            getattr(command, step)(config, revision)

    try:
        migrate("upgrade", "0033")
        narrow, before = _widths_and_triggers(db)
        assert set(narrow.values()) == {128} and len(narrow) == 6
        migrate("upgrade", "0034")
        wide, after = _widths_and_triggers(db)
        assert set(wide.values()) == {253} and after == before
        migrate("downgrade", "0033")
        assert _widths_and_triggers(db) == (narrow, before)
    finally:
        db.dispose()


def test_the_change_feed_counts_changes_the_scheduler_reads_and_skips_the_rest(
    pg_store: str,
) -> None:
    db = Database(pg_store)
    try:
        db.migrate()
        watch = ChangeWatch(db)
        assert watch.read() == 0  # the sequence was never used
        with db.write() as session:
            session.add(VirtualClusterRow(name="team", created_at=0.0))
        first = watch.read()
        assert first >= 1
        with db.write() as session:
            session.execute(text("UPDATE virtual_clusters SET guarantee_gpu = 2"))
        assert watch.read() > first
        with db.read() as session:
            kinds = session.execute(select(SchedChange.kind, SchedChange.key)).all()
        assert ("vc", "team") in [tuple(k) for k in kinds]
    finally:
        db.dispose()


def test_a_data_set_over_2_gib_fits(pg_store: str) -> None:
    db = Database(pg_store)
    try:
        db.migrate()
        with db.write() as session:
            session.add(
                DataSetRow(owner="ann", name="big", sha256="0" * 64, kind="file",
                        size=3 * 2**30, created_at=0.0, shares={})
            )  # fmt: skip
        with db.read() as session:
            assert session.scalar(select(DataSetRow.size)) == 3 * 2**30
    finally:
        db.dispose()


def test_writers_of_two_processes_take_turns(pg_store: str) -> None:
    """Two Database objects (as the API server and its scheduler process, or two servers): a
    write waits for the other's transaction to end, and then sees what it wrote."""
    first, second = Database(pg_store), Database(pg_store)
    try:
        first.migrate()
        order: list[str] = []
        holding = threading.Event()

        def slow_writer() -> None:
            with first.write() as session:
                holding.set()
                session.add(VirtualClusterRow(name="a", created_at=0.0))
                time.sleep(0.5)
                order.append("first committed")

        thread = threading.Thread(target=slow_writer)
        thread.start()
        assert holding.wait(10)
        with second.write() as session:
            order.append("second began")
            names = session.execute(text("SELECT name FROM virtual_clusters")).scalars()
            assert "a" in set(names)
        thread.join(10)
        assert order == ["first committed", "second began"]
    finally:
        first.dispose()
        second.dispose()


def test_the_server_schedules_a_job_on_postgresql(tmp_path: Path, pg_store: str) -> None:
    """Submitted, listed, placed on an agent's node by the scheduler, and still there for a
    server started again on the same store. The node's name is as long as a Kubernetes Node's
    may be (253 characters: migration 0034 widened the node columns PostgreSQL enforces)."""
    home = tmp_path / "home"
    settings = ServerSettings(
        home=home, database_url=pg_store, scheduler="thread", scheduler_interval_s=0.05
    )
    ctx = prepare(settings)
    assert ctx.settings.database_url == store_url(pg_store)  # the scheduler process's too
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx)) as api:
        api.headers["Authorization"] = f"Bearer {token}"
        register_node(api, home, gpus=1, name=LONGEST_NODE_NAME)
        made = api.post("/api/v1/jobs", json={"spec": JOB.format(name="pg", gpu=1)})
        assert made.status_code == 201, made.text
        job_id = made.json()[0]["id"]
        deadline = time.monotonic() + 20
        while api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "WAITING":
            assert time.monotonic() < deadline, "the scheduler did not place the job"
            time.sleep(0.1)
    ctx.db.dispose()
    again = prepare(settings)
    with TestClient(create_app(again, run_scheduler=False)) as api:
        api.headers["Authorization"] = f"Bearer {token}"
        listed = api.get("/api/v1/jobs").json()
        assert [j["id"] for j in listed] == [job_id]
        placed = api.get(f"/api/v1/jobs/{job_id}").json()["tasks"]
        assert [t["node"] for t in placed] == [LONGEST_NODE_NAME]
    again.db.dispose()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("mysql://u@h/db", "mysql is not a store shoal supports"),
        ("not a url", "is not a database URL"),
    ],
)
def test_a_store_url_shoal_cannot_use_is_refused_naming_what_is(given: str, said: str) -> None:
    with pytest.raises(StoreUrlError, match=said):
        store_url(given)


def test_postgresql_urls_use_psycopg() -> None:
    assert store_url("postgresql://u:p@h:5/db") == "postgresql+psycopg://u:p@h:5/db"
    assert store_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
