"""tasks start in the submitter's environment and directory

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("inherited_env", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("submit_dir", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("submit_dir")
        batch_op.drop_column("inherited_env")
