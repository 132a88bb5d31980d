"""Copy a whole store into a new, empty one: how a SQLite cluster moves to PostgreSQL
(`shoal server move-store`, docs/postgresql.md). Used with the server stopped.

The target gets the schema from the same migrations, then every table's rows in foreign-key
order, in batches, in one transaction: a copy that fails leaves the target as empty as it was.
The change feed (``sched_changes``) is not copied: a scheduler starting on the target reloads its
model whole. PostgreSQL's sequences are moved past the copied ids, so new rows do not collide.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import Connection, Table, delete, func, select, text

from shoal.store.db import Database
from shoal.store.models import Base

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


def copy_store(source: Database, target: Database) -> Copied:
    """Copy every row of ``source`` into ``target`` (migrated here; it must hold no rows)."""
    source.migrate()  # an older store is brought to the same head first
    target.migrate()
    tables = [t for t in Base.metadata.sorted_tables if t.name not in SKIPPED]
    counts: dict[str, int] = {}
    with source.engine.connect() as reading, target.engine.begin() as writing:
        _refuse_rows(writing, tables)
        for table in tables:
            counts[table.name] = 0
            for batch in _batches(reading, table):
                writing.execute(table.insert(), batch)
                counts[table.name] += len(batch)
        writing.execute(delete(Base.metadata.tables["sched_changes"]))  # the inserts' notes
        if writing.dialect.name == "postgresql":
            _advance_sequences(writing, tables)
    return Copied(counts)


def _refuse_rows(connection: Connection, tables: list[Table]) -> None:
    """A migrated store holds rows of its own in no table but these; any other row means the
    target is a cluster's store already."""
    for table in tables:
        if connection.execute(select(func.count()).select_from(table)).scalar():
            raise TargetNotEmpty(
                f"the target store already has rows in {table.name}: move into an empty "
                "database (createdb a new one)"
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
