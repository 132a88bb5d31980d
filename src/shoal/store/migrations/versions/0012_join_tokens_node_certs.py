"""join: join tokens, node certificates, node labels

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 08:30:00.000000

``join_tokens`` holds the tokens agents join with (only the secret's SHA-256); ``node_certs`` the
client certificate signed for each node at join (serial, fingerprint; ``revoked_at`` when the node
is removed); ``nodes.labels`` the labels given at join.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("max_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "node_certs",
        sa.Column("serial", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("join_token", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("issued_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("serial"),
    )
    op.create_index("ix_node_certs_node", "node_certs", ["node"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_node_certs_node", table_name="node_certs")
    op.drop_table("node_certs")
    op.drop_table("join_tokens")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("labels")
