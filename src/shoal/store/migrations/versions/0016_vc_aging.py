"""attained-service aging per virtual cluster

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 11:00:00

``virtual_clusters.aging``: {"policy": "las", "thresholds_gpu_hours": [...]} when the VC orders
its jobs by the GPU time they have had (``shoal.core.aging``); NULL (every existing VC): off.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("aging", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters", schema=None) as batch_op:
        batch_op.drop_column("aging")
