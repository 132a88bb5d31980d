"""images: pushed container images, the images container jobs run, jobs waiting for one

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-25 17:00:00.000000

``images``: one row per NAME:TAG (``shoal image push``), its archive in the blob store by sha256.
``job_images``: the images a container job's roles name (an array's parent stands for its
elements), so removing an image finds the queued jobs that need it. ``jobs.missing_image``: the
image a waiting job is held for (``ImageNotFound``), outside the scheduler's queue. A plain ADD
COLUMN on ``jobs`` (and a plain DROP COLUMN back), so the triggers of migration 0017 stay.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("image_id", sa.String(length=64), nullable=False),
        sa.Column("blob_sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("pushed_by", sa.String(length=64), nullable=False),
        sa.Column("pushed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "job_images",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("image", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "image"),
    )
    op.create_index("ix_job_images_image", "job_images", ["image"], unique=False)
    op.add_column("jobs", sa.Column("missing_image", sa.String(length=255), nullable=True))


def downgrade() -> None:
    # SQLite (3.35+) drops a column in place: no batch copy, so the jobs triggers stay
    op.drop_column("jobs", "missing_image")
    op.drop_index("ix_job_images_image", table_name="job_images")
    op.drop_table("job_images")
    op.drop_table("images")
