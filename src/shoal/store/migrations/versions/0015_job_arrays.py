"""job arrays: a parent job and its elements

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 09:00:00.000000

A parent has ``array_size`` and ``array_cap``; an element ``array_job_id`` and ``array_index``.
``array_held`` marks jobs the scheduler must not look at: a parent, and an element held back by
its array's concurrency cap. ``ix_jobs_array`` serves the per-array counts (state, held) and
the next held elements by index; it is partial (elements only), so "array_job_id IS NULL" in
job listings cannot pick it over the seq index. ``ix_jobs_listing`` answers `job list` by state
(newest first, elements left out) from the index alone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("array_job_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("array_size", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("array_cap", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("array_held", sa.Boolean(), nullable=False, server_default="0")
        )
        batch_op.create_index(
            "ix_jobs_array",
            ["array_job_id", "state", "array_held", "array_index"],
            unique=False,
            sqlite_where=sa.text("array_job_id IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_jobs_listing", ["state", "array_job_id", "seq", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_listing")
        batch_op.drop_index("ix_jobs_array")
        batch_op.drop_column("array_held")
        batch_op.drop_column("array_cap")
        batch_op.drop_column("array_size")
        batch_op.drop_column("array_index")
        batch_op.drop_column("array_job_id")
