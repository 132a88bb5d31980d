"""job tags: OpenPAI's free-form labels on a job (``PUT/DELETE /api/v2/jobs/{job}/tag``)

Revision ID: 0019
Revises: 0017
Create Date: 2026-11-25 13:45:00.000000

One row per (job, tag), deleted with its job. ``ix_job_tags_tag`` serves the list filters
``tagsContain`` / ``tagsNotContain`` (jobs having / lacking one of some tags).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_tags",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("tag", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "tag"),
    )
    op.create_index("ix_job_tags_tag", "job_tags", ["tag", "job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_tags_tag", table_name="job_tags")
    op.drop_table("job_tags")
