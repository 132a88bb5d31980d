"""Copy a whole store into another: how a SQLite cluster moves to PostgreSQL (`shoal server
move-store`, docs/postgresql.md), how a PostgreSQL store is backed up (a snapshot copied into a
SQLite file, server/services/backup.py) and how a backup is restored into PostgreSQL
(local/restore.py); docs/backup.md.

The target gets the schema from the same migrations, then every table's rows in foreign-key
order, in batches, in one transaction: a copy that fails leaves the target as it was. The rows
are read through one connection, so its transaction decides what the copy holds (a backup reads
in one ``REPEATABLE READ`` snapshot). The change feed (``sched_changes``) is not copied: a
scheduler starting on the target reloads its model whole. PostgreSQL's sequences are moved past
the copied ids, so new rows do not collide.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import Connection, Table, delete, func, select, text, update

from shoal.store.db import WRITE_LOCK_KEY, Database
from shoal.store.models import Base, SchedulerLeaseRow

BATCH = 2_000
SKIPPED = {"sched_changes"}  # rebuilt by the triggers; a starting scheduler reads the store whole


class TargetNotEmpty(RuntimeError):
    """The target store already holds a cluster's rows."""


@dataclass(frozen=True)
class Copied:
    tables: dict[str, int]  # rows per table

    @property
    def rows(self) -> int:
        return sum(self.tables.values())


def copied_tables() -> list[Table]:
    """The tables a copy holds, parents before the tables that refer to them."""
    return [t for t in Base.metadata.sorted_tables if t.name not in SKIPPED]


def copy_store(source: Database, target: Database) -> Copied:
    """Copy every row of ``source`` into ``target`` (migrated here; it must hold no rows)."""
    source.migrate()  # an older store is brought to the same head first
    with source.engine.connect() as reading:
        return copy_rows(reading, target)


def copy_rows(reading: Connection, target: Database, replace: bool = False) -> Copied:
    """Copy every row ``reading`` sees (a store at the schema head; the caller's transaction on
    it decides which rows) into ``target``, migrated here. ``target`` must hold no rows, unless
    ``replace``: then its rows are removed first, in the same transaction (under the store's
    write lock on PostgreSQL), so it holds either its old rows or the new ones, never a mix."""
    target.migrate()
    tables = copied_tables()
    counts: dict[str, int] = {}
    with target.engine.begin() as writing:
        postgresql = writing.dialect.name == "postgresql"
        fencing = _empty(writing, tables) if replace else _refuse_rows(writing, tables)
        for table in tables:
            counts[table.name] = 0
            for batch in _batches(reading, table):
                writing.execute(table.insert(), batch)
                counts[table.name] += len(batch)
        writing.execute(delete(Base.metadata.tables["sched_changes"]))  # the inserts' notes
        if replace:
            _raise_fencing_tokens(writing, fencing)
        if postgresql:
            _advance_sequences(writing, tables)
    return Copied(counts)


def _refuse_rows(connection: Connection, tables: list[Table]) -> int:
    """A migrated store holds rows of its own in no table but these; any other row means the
    target is a cluster's store already."""
    for table in tables:
        if connection.execute(select(func.count()).select_from(table)).scalar():
            raise TargetNotEmpty(
                f"the target store already has rows in {table.name}: move into an empty "
                "database (createdb a new one)"
            )
    return 0


def _empty(connection: Connection, tables: list[Table]) -> int:
    """Remove every row (children first); returns the largest scheduler-lease token there was."""
    if connection.dialect.name == "postgresql":
        connection.execute(text(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})"))
    largest = connection.execute(select(func.max(SchedulerLeaseRow.token))).scalar() or 0
    everything = [*tables, Base.metadata.tables["sched_changes"]]
    if connection.dialect.name == "postgresql":  # one statement; fires no row triggers
        names = ", ".join(connection.dialect.identifier_preparer.quote(t.name) for t in everything)
        connection.execute(text(f"TRUNCATE {names}"))
    else:
        for table in reversed(everything):
            connection.execute(delete(table))
    return int(largest)


def _raise_fencing_tokens(connection: Connection, largest: int) -> None:
    """The restored lease has expired, with a token above any the replaced store issued: a
    scheduler of a run named in either cannot apply a plan it made before the restore."""
    token = SchedulerLeaseRow.token
    larger = func.greatest if connection.dialect.name == "postgresql" else func.max
    connection.execute(
        update(SchedulerLeaseRow).values(token=larger(token, largest) + 1, expires_at=0.0)
    )


def _batches(connection: Connection, table: Table) -> Iterator[list[dict[str, object]]]:
    result = connection.execution_options(stream_results=True).execute(select(table))
    for rows in result.mappings().partitions(BATCH):
        yield [dict(row) for row in rows]


def _advance_sequences(connection: Connection, tables: list[Table]) -> None:
    """Each serial id column's sequence past the largest id copied (or back to 1 if none)."""
    for table in tables:
        for column in table.primary_key.columns:
            if column.autoincrement is not True and not (
                column.autoincrement == "auto" and column.type.python_type is int
            ):
                continue
            sequence = connection.execute(
                text("SELECT pg_get_serial_sequence(:table, :column)"),
                {"table": table.name, "column": column.name},
            ).scalar()
            if sequence is None:
                continue
            largest = connection.execute(select(func.max(column))).scalar()
            connection.execute(
                text("SELECT setval(:sequence, :value, :called)"),
                {"sequence": sequence, "value": largest or 1, "called": largest is not None},
            )
