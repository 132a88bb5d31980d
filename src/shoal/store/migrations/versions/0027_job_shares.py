"""jobs.shares: who else may reach a job's tasks' ports (``shoal job share``)

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-03 10:00:00.000000

``{"users": [...], "groups": [...]}`` (docs/proxy.md, "Sharing a job's ports"): besides the job's
owner and admins, these users and the members of these groups may open the job's tasks' pages
through the task proxy and forward their ports. Nothing else of the job is shared.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("shares", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("shares")
