"""nodes.unsupported: what a node's agent cannot do here, with why (docs/containers.md)

Revision ID: 0020
Revises: 0018_pai_accounts
Create Date: 2026-11-25 16:00:00.000000

``{"container": "podman is not installed ...", "memory": "..."}``: the runtimes and limits the
agent found it cannot provide. Empty: everything works. A plain ADD COLUMN, so the triggers of
migration 0017 on ``nodes`` stay as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0018_pai_accounts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("unsupported", sa.JSON(), server_default="{}", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("unsupported")
