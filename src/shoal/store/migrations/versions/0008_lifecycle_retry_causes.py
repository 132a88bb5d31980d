"""lifecycle: retries counted by cause

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 10:00:00.000000

A job's attempts that went back to the queue, split by cause as OpenPAI's ``retryDetails`` does:
the user's code failed, the platform failed, or its resources were reclaimed (preemption). Jobs
from before this revision get their preemptions back from their events (every preemption's
requeue was recorded); the rest of their retries count as the user's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

COLUMNS = ("retries_user", "retries_platform", "retries_resource")


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name in COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
    op.execute(
        """
        UPDATE jobs SET retries_resource = (
            SELECT COUNT(*) FROM events
            WHERE events.job_id = jobs.id AND events.kind = 'requeued'
              AND events.message LIKE 'back in the queue after preemption%'
        )
        """
    )
    op.execute(
        """
        UPDATE jobs SET retries_user = CASE WHEN {used} > 0 THEN {used} ELSE 0 END
        """.format(  # SQLite's MAX(a, b) is PostgreSQL's GREATEST: a CASE works on both
            used="((CASE WHEN state = 'WAITING' THEN attempt ELSE attempt - 1 END)"
            " - retries_resource)"
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name in reversed(COLUMNS):
            batch_op.drop_column(name)
