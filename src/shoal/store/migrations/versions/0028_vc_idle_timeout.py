"""virtual_clusters.idle_timeout_s: interactive jobs idle this long are stopped

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03 12:00:00.000000

docs/notebooks.md, "Idle timeout": a job marked ``interactive: true`` (the jupyter and
tensorboard templates) is stopped once no request has reached its tasks through the task proxy
for this many seconds. NULL (every VC before this revision): never.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.add_column(sa.Column("idle_timeout_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.drop_column("idle_timeout_s")
