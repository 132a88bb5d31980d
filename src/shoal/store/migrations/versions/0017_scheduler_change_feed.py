"""scheduler change feed: triggers note every change the scheduler's model must see

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25 10:30:00.000000

The scheduler keeps an in-memory model of nodes, running allocations, VCs and the queue
(server/model.py). Instead of reloading the world every cycle it reads ``sched_changes``: one row
per changed job, node or VC, written by triggers in the same transaction as the change itself, so
no writer (API, agent reports, admin tools, another process) can forget to say so. Only the
columns the scheduler reads fire a trigger, and only when their value changes: heartbeats, usage
and log counters do not. The model deletes rows it has read.

A later migration that alters one of these tables in SQLite's batch mode (which copies the table)
drops its triggers and must create them again (tests/server/test_scheduler_model.py checks that
they all exist at the head). The triggers' SQL for SQLite and PostgreSQL is in
``shoal/store/triggers.py``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shoal.store.triggers import create_triggers, drop_functions, drop_trigger

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

WATCHED = {
    # table: (kind, key column, columns the scheduler reads)
    "jobs": (
        "job",
        "id",
        (
            "state",
            "version",
            "completing",
            "stop_requested",
            "priority",
            "virtual_cluster",
            "submitted_at",
            "user",
        ),
    ),
    "tasks": (
        "job",
        "job_id",
        ("state", "node", "kill_requested", "cpu_millis", "memory_mib", "gpu_indices", "ports"),
    ),
    "nodes": (
        "node",
        "name",
        (
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
        ),
    ),
    "virtual_clusters": ("vc", "name", ()),
}


def upgrade() -> None:
    op.create_table(
        "sched_changes",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sqlite_autoincrement=True,
    )
    dialect = op.get_bind().dialect.name
    for table, (kind, key, columns) in WATCHED.items():
        for statement in create_triggers(dialect, table, kind, key, columns):
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in WATCHED:
        for what in ("insert", "update", "delete"):
            op.execute(drop_trigger(dialect, table, what))
        for statement in drop_functions(dialect, table):
            op.execute(statement)
    op.drop_table("sched_changes")
