"""OpenPAI accounts: users' email and extension, groups' own attributes

Revision ID: 0018_pai_accounts
Revises: 0019
Create Date: 2026-11-25 14:00:00.000000

``/api/v2/users`` (OpenPAI's REST API) has an ``email`` and a free ``extension`` object per user;
``/api/v2/groups`` a ``description``, ``externalName`` and ``extension`` per group. Group
membership stays ``users.groups`` and VC access ``virtual_clusters.members``; ``user_groups`` only
holds what a group has besides its name. Existing users get an empty email and extension, and
the group names they carry stay groups (with empty attributes) without a row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_pai_accounts"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs: ``users`` is not one of the tables with change-feed triggers, and no
    # batch copy is needed for columns with a default.
    op.add_column(
        "users", sa.Column("email", sa.String(length=255), nullable=False, server_default="")
    )
    op.add_column("users", sa.Column("extension", sa.JSON(), nullable=False, server_default="{}"))
    op.create_table(
        "user_groups",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("external_name", sa.String(length=255), nullable=False),
        sa.Column("extension", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("user_groups")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("extension")
        batch_op.drop_column("email")
