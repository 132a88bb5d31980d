"""tasks: what the earlier attempts of a task retried in place used

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 13:30:00.000000

A task retried in place keeps its row; its last attempt's times and usage are overwritten by the
next attempt, so what the earlier attempts used is folded into ``earlier_usage`` for accounting.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("earlier_usage", sa.JSON(), nullable=False, server_default="{}")
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("earlier_usage")
