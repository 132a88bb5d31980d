"""exec_sessions: the audit log of `shoal job exec` and the dashboard's terminal

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-01 12:00:00.000000

One row per session: who opened it, in which task (job, role, index, attempt, node), the command,
whether it had a tty, when it started and ended, the command's exit code and why it ended. No
foreign key to ``jobs``: the log outlives the job. A new table only: the triggers of migration
0017 are untouched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "exec_sessions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("tty", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("end_reason", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_exec_sessions_started", "exec_sessions", ["started_at"], unique=False)
    op.create_index("ix_exec_sessions_user", "exec_sessions", ["user"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_exec_sessions_user", table_name="exec_sessions")
    op.drop_index("ix_exec_sessions_started", table_name="exec_sessions")
    op.drop_table("exec_sessions")
