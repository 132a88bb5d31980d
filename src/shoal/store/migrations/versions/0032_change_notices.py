"""change notices: on PostgreSQL, every transaction that notes a change also NOTIFYs the servers

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-28 01:20:00.000000

docs/postgresql.md, "Several API servers". The change feed's triggers (0017) note changes in
``sched_changes``; a statement trigger on that table sends ``NOTIFY shoal_changes`` (delivered at
commit, once per transaction), so the scheduler of whichever server leads starts a cycle at once
for a job submitted through another server. SQLite has one server process per file: nothing to do.
"""

from __future__ import annotations

from alembic import op

from shoal.store.triggers import POSTGRESQL

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

CHANNEL = "shoal_changes"  # shoal.server.store_news reads it


def upgrade() -> None:
    if op.get_bind().dialect.name != POSTGRESQL:
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION sched_changes_notice() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER sched_changes_notice AFTER INSERT ON sched_changes "
        "FOR EACH STATEMENT EXECUTE FUNCTION sched_changes_notice()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != POSTGRESQL:
        return
    op.execute("DROP TRIGGER IF EXISTS sched_changes_notice ON sched_changes")
    op.execute("DROP FUNCTION IF EXISTS sched_changes_notice()")
