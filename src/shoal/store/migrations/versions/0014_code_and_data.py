"""code and data: jobs name their code archive by sha256 and pin their data sets; data sets

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 08:30:00.000000

``jobs.code_hash`` is the sha256 of the job's code archive in the blob store (jobs stored before
keep ``code/{id}.tar.gz``, which the agent API still serves); ``jobs.data_sets`` the data sets a
job declares, resolved at submission; ``data_sets`` one row per owner and name.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("code_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("data_sets", sa.JSON(), nullable=False, server_default="{}"))
    op.create_table(
        "data_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("shares", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_data_sets_owner_name", "data_sets", ["owner", "name"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_data_sets_owner_name", table_name="data_sets")
    op.drop_table("data_sets")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("data_sets")
        batch_op.drop_column("code_hash")
