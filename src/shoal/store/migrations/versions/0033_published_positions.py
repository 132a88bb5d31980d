"""published_positions: the leading scheduler's queue positions, for the other servers

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-28 02:00:00.000000

docs/postgresql.md, "Several servers". A server whose scheduler does not lead reads the queue
positions it shows from here (one row, rewritten by the leader at most once a second when they
changed, under its lease's fencing token).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "published_positions",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("published_at", sa.Float(), nullable=False),
        sa.Column("queues", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("published_positions")
