"""node names as long as Kubernetes allows (253 characters, a DNS subdomain)

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-28 05:00:00.000000

A Kubernetes Node's name may be 253 characters long, and the Kubernetes agent reports each Node
under its name. Every column that holds a node's name grows from 128 to 253. SQLite does not
enforce VARCHAR lengths, so only PostgreSQL's columns change (widening a VARCHAR there rewrites
no rows; the triggers on those tables are made again around it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

NODE_NAME_COLUMNS = (
    ("nodes", "name"),
    ("node_certs", "node"),
    ("tasks", "node"),
    ("node_events", "node"),
    ("exec_sessions", "node"),
    ("cloud_instances", "node"),
)


def _resize(length: int, before: int) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, column in NODE_NAME_COLUMNS:
        # PostgreSQL cannot change a column a trigger's WHEN names: the table's triggers (the
        # change feed's) are dropped and made again from their own definitions around it
        triggers = bind.execute(
            sa.text(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = CAST(:table AS regclass) AND NOT tgisinternal"
            ),
            {"table": table},
        ).all()
        for name, _ in triggers:
            op.execute(f'DROP TRIGGER "{name}" ON {table}')
        op.alter_column(table, column, type_=sa.String(length), existing_type=sa.String(before))
        for _, definition in triggers:
            op.execute(definition)


def upgrade() -> None:
    _resize(253, 128)


def downgrade() -> None:
    _resize(128, 253)
