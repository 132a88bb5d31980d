"""data_sets.size and sched_changes.seq as 64-bit integers: PostgreSQL's INTEGER is 32 bits

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27 22:00:00.000000

docs/postgresql.md. SQLite stores every integer in up to 8 bytes whatever the column says, so a
data set of 3 GiB and the change feed's counter past 2^31 were always fine there. On PostgreSQL
an INTEGER is 4 bytes: a data set over 2 GiB would be refused, and the change feed (a few
changes per job; its counter only grows) would stop a busy cluster after 2^31 changes. Both
become BIGINT. On SQLite the column type changes in the schema only (data_sets is copied by
batch mode; sched_changes, whose triggers live on other tables, is left as it is).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("data_sets") as batch:
        batch.alter_column("size", type_=sa.BigInteger(), existing_type=sa.Integer())
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE sched_changes ALTER COLUMN seq TYPE BIGINT")
        op.execute("ALTER SEQUENCE sched_changes_seq_seq AS BIGINT")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER SEQUENCE sched_changes_seq_seq AS INTEGER")
        op.execute("ALTER TABLE sched_changes ALTER COLUMN seq TYPE INTEGER")
    with op.batch_alter_table("data_sets") as batch:
        batch.alter_column("size", type_=sa.Integer(), existing_type=sa.BigInteger())
