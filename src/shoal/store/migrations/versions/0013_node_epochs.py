"""nodes: an epoch that rises each time the node goes NOT_READY (fencing)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 08:30:00.000000

Launch orders carry the node's epoch and agents report the epoch each attempt was launched under;
a report about an attempt of an older epoch changes nothing and is answered with a kill.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("epoch")
