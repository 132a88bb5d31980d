"""scheduler_lease: which process runs scheduling cycles, until when, under which fencing token

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27 22:20:00.000000

docs/postgresql.md, "One scheduler". One row. Several servers on one store each run a scheduler
loop; only the holder of an unexpired lease runs cycles. A takeover raises ``token``; every plan
is applied in a write transaction that first checks the row still names its scheduler's
incarnation and token, so a scheduler paused past its lease cannot apply a stale plan.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_lease",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("holder", sa.String(512), nullable=False),
        sa.Column("incarnation", sa.String(64), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scheduler_lease")
