"""nodes.fencing and nodes.platform_hold: nodes a platform runs (Kubernetes)

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 03:00:00.000000

``fencing``: how the node's tasks are kept from running twice. ``lease`` (shoal's own agents:
a silent agent's tasks stop with its lease, so they are lost after the node timeout) or
``confirmed`` (Kubernetes: nothing stops a Pod when shoal loses touch with it, so its task ends
only when the agent confirms the Pod is gone; docs/kubernetes.md). ``platform_hold``: why the
platform keeps new tasks off the node (a cordoned Kubernetes Node); NULL: it does not.
``task_address``: how peers reach a task placed there, a pattern (a Pod's DNS name in the
Kubernetes pod-network mode); NULL: at the node's address.

The scheduler's model must hear of a platform hold like of an administrator's: the ``nodes``
update trigger of migration 0017 is made again with ``platform_hold`` among its columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shoal.store.triggers import drop_trigger, update_trigger

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


NODE_COLUMNS = (
    "address",
    "cpu_millis",
    "memory_mib",
    "gpu_indices",
    "gpu_type",
    "port_low",
    "port_high",
    "busy_ports",
    "schedulable",
    "state",
    "hold",
)


def _update_trigger(columns: tuple[str, ...]) -> str:
    return update_trigger(op.get_bind().dialect.name, "nodes", "node", "name", columns)


def _drop_update_trigger() -> str:
    return drop_trigger(op.get_bind().dialect.name, "nodes", "update")


def upgrade() -> None:
    op.add_column(
        "nodes", sa.Column("fencing", sa.String(16), server_default="lease", nullable=False)
    )
    op.add_column("nodes", sa.Column("platform_hold", sa.String(255), nullable=True))
    op.add_column("nodes", sa.Column("task_address", sa.String(255), nullable=True))
    op.execute(_drop_update_trigger())
    op.execute(_update_trigger((*NODE_COLUMNS, "platform_hold")))


def downgrade() -> None:
    op.execute(_drop_update_trigger())
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("task_address")
        batch.drop_column("platform_hold")
        batch.drop_column("fencing")
    op.execute(_update_trigger(NODE_COLUMNS))
