"""strict FIFO virtual clusters

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("strict_fifo", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_column("strict_fifo")
