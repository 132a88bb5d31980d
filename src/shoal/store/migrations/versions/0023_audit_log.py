"""audit_events: the audit log of security-relevant actions

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-25 12:00:00.000000

One row per action (docs/audit.md): sign-ins (and refused ones), tokens created, revoked and
first used by a new client, user, group and VC changes, nodes joined, held and removed, join
tokens, stops of other users' jobs, terminal sessions opened (and refused), backups. Written in
the same transaction as the change it records. No foreign keys: the log outlives what it names.
A new table only: the triggers of migration 0017 are untouched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=48), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"], unique=False)
    op.create_index("ix_audit_events_actor", "audit_events", ["actor", "at"], unique=False)
    op.create_index(
        "ix_audit_events_action_target", "audit_events", ["action", "target"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_audit_events_action_target", table_name="audit_events")
    op.drop_index("ix_audit_events_actor", table_name="audit_events")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_table("audit_events")
