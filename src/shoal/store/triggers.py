"""The change feed's triggers (migration 0017), in each store's own SQL.

A trigger notes a changed job, node or VC in ``sched_changes`` in the same transaction as the
change. SQLite writes the statement in the trigger's body; PostgreSQL calls a function, one per
table and row (``NEW`` for inserts and updates, ``OLD`` for deletes). Migrations call these with
the dialect's name (``op.get_bind().dialect.name``), so one migration serves both stores.
"""

from __future__ import annotations

POSTGRESQL = "postgresql"


def create_triggers(
    dialect: str, table: str, kind: str, key: str, columns: tuple[str, ...]
) -> list[str]:
    """Statements that make ``table``'s insert, delete and update triggers; an update fires
    only when one of ``columns`` changed (none given: any update)."""
    if dialect == POSTGRESQL:
        return [
            *_pg_functions(table, kind, key),
            _pg_trigger(table, "insert", "new", None),
            _pg_trigger(table, "delete", "old", None),
            update_trigger(dialect, table, kind, key, columns),
        ]
    note = "INSERT INTO sched_changes (kind, key) VALUES ('{kind}', {row}.\"{key}\");"
    return [
        f"CREATE TRIGGER sched_{table}_insert AFTER INSERT ON {table} BEGIN "
        + note.format(kind=kind, row="NEW", key=key)
        + " END",
        f"CREATE TRIGGER sched_{table}_delete AFTER DELETE ON {table} BEGIN "
        + note.format(kind=kind, row="OLD", key=key)
        + " END",
        update_trigger(dialect, table, kind, key, columns),
    ]


def update_trigger(dialect: str, table: str, kind: str, key: str, columns: tuple[str, ...]) -> str:
    """The statement that makes ``table``'s update trigger (its function exists already)."""
    if dialect == POSTGRESQL:
        # as text: JSON columns have no equality operator in PostgreSQL
        changed = " OR ".join(f'OLD."{c}"::text IS DISTINCT FROM NEW."{c}"::text' for c in columns)
        return _pg_trigger(table, "update", "new", changed or None)
    when = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in columns)
    return (
        f"CREATE TRIGGER sched_{table}_update AFTER UPDATE ON {table} "
        + (f"WHEN {when} " if when else "")
        + f"BEGIN INSERT INTO sched_changes (kind, key) VALUES ('{kind}', NEW.\"{key}\"); END"
    )


def drop_trigger(dialect: str, table: str, what: str) -> str:
    """The statement that drops ``table``'s ``what`` (insert, update, delete) trigger."""
    on = f" ON {table}" if dialect == POSTGRESQL else ""
    return f"DROP TRIGGER IF EXISTS sched_{table}_{what}{on}"


def drop_functions(dialect: str, table: str) -> list[str]:
    if dialect != POSTGRESQL:
        return []
    return [f"DROP FUNCTION IF EXISTS sched_{table}_{row}()" for row in ("new", "old")]


def _pg_functions(table: str, kind: str, key: str) -> list[str]:
    return [
        f"CREATE OR REPLACE FUNCTION sched_{table}_{row}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN INSERT INTO sched_changes (kind, key) VALUES ('{kind}', {row.upper()}.\"{key}\"); "
        "RETURN NULL; END $$"
        for row in ("new", "old")
    ]


def _pg_trigger(table: str, what: str, row: str, when: str | None) -> str:
    return (
        f"CREATE TRIGGER sched_{table}_{what} AFTER {what.upper()} ON {table} FOR EACH ROW "
        + (f"WHEN ({when}) " if when else "")
        + f"EXECUTE FUNCTION sched_{table}_{row}()"
    )
