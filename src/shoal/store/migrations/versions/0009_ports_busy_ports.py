"""ports: the ports of a node's range held by other processes

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 12:00:00.000000

The agent reports which ports of each node's task-port range are held by processes that are not
its tasks; the scheduler treats them as taken.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("busy_ports", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("busy_ports")
