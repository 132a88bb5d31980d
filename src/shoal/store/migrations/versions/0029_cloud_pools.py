"""cloud_instances, cloud_offer_blocks, cloud_pool_targets: the machines shoal's pools created

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 18:00:00.000000

docs/cloud.md. A row per machine a pool asked a provider for, written before the provider is
asked (so a server killed during a scale-up knows, after restart, every machine it may have
started), kept after the machine is gone for node-hours and cost. Offers refused for quota or
never joined are blocked until a time; `shoal cluster scale` sets a pool's target.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cloud_instances",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("pool", sa.String(32), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("offer_key", sa.String(160), nullable=True),
        sa.Column("instance_id", sa.String(255), nullable=True),
        sa.Column("address", sa.String(64), nullable=True),
        sa.Column("price_per_hour", sa.Float(), nullable=False, server_default="0"),
        sa.Column("cpu_millis", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("memory_mib", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("gpus", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("spot", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("launched_at", sa.Float(), nullable=False),
        sa.Column("joined_at", sa.Float(), nullable=True),
        sa.Column("idle_since", sa.Float(), nullable=True),
        sa.Column("removal_cause", sa.String(32), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
    )
    op.create_index("ix_cloud_instances_pool", "cloud_instances", ["pool", "ended_at"])
    op.create_index("ix_cloud_instances_node", "cloud_instances", ["node"])
    op.create_table(
        "cloud_offer_blocks",
        sa.Column("offer", sa.String(200), primary_key=True),
        sa.Column("until", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
    )
    op.create_table(
        "cloud_pool_targets",
        sa.Column("pool", sa.String(32), primary_key=True),
        sa.Column("target", sa.Integer(), nullable=False),
        sa.Column("set_by", sa.String(64), nullable=False),
        sa.Column("set_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cloud_pool_targets")
    op.drop_table("cloud_offer_blocks")
    op.drop_index("ix_cloud_instances_node", "cloud_instances")
    op.drop_index("ix_cloud_instances_pool", "cloud_instances")
    op.drop_table("cloud_instances")
