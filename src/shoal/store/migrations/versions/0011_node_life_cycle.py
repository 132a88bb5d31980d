"""nodes: the node life cycle (NOT_READY replaces LOST, administrator holds, agent version, events)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 14:10:00.000000

``state`` is the node's liveness (READY | NOT_READY; rows written as LOST become NOT_READY),
``hold`` an administrator's CORDONED | DRAINING (NONE otherwise), ``agent_version`` the shoal
version its agent reports; ``node_events`` records every change of a node's state.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("hold", sa.String(length=16), nullable=False, server_default="NONE")
        )
        batch_op.add_column(sa.Column("agent_version", sa.String(length=64), nullable=True))
    op.execute("UPDATE nodes SET state = 'NOT_READY' WHERE state = 'LOST'")
    op.execute("UPDATE nodes SET hold = 'CORDONED' WHERE NOT schedulable")
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("by", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_events_node", "node_events", ["node"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_node_events_node", table_name="node_events")
    op.drop_table("node_events")
    op.execute("UPDATE nodes SET state = 'LOST' WHERE state = 'NOT_READY'")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("agent_version")
        batch_op.drop_column("hold")
