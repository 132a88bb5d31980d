"""The change feed's counter (migration 0017): triggers note every change to what readers act
on (a job's or task's state, node, resources; a node's state; a VC) in ``sched_changes``,
whichever process wrote it. The table's counter (SQLite's AUTOINCREMENT in ``sqlite_sequence``;
on PostgreSQL the largest committed number, below) moves with every change, even after the
scheduler deletes the rows it read, so it is a cheap "something changed" signal."""

from __future__ import annotations

from sqlalchemy import text

from shoal.store.db import Database

_GENERATION = text("SELECT seq FROM sqlite_sequence WHERE name = 'sched_changes'")
# PostgreSQL's sequence moves when a number is taken, before its transaction commits: a page
# could reload before the change is visible and then not again. The largest committed number
# moves only with commits (and back when the scheduler deletes rows it read: a page then
# reloads once for nothing, never misses a change).
_PG_GENERATION = text("SELECT coalesce(max(seq), 0) FROM sched_changes")


def store_generation(db: Database) -> int:
    """The change feed's counter: it moves with every committed change a reader acts on."""
    with db.read() as session:
        value = session.execute(_GENERATION if db.is_sqlite else _PG_GENERATION).scalar()
    return int(value or 0)
