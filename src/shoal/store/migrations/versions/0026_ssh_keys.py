"""ssh_keys: the SSH public keys users register (``shoal user key add``)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 10:00:00.000000

One row per key (docs/ssh.md): its owner, a name unique per user, the key line as OpenSSH writes
it (``ssh-ed25519 AAAA... comment``) and its SHA256 fingerprint. A job that runs OpenPAI's ``ssh``
runtime plugin installs its owner's keys in every task's ``authorized_keys`` when it is submitted.
No foreign key to ``users``: a user's keys are deleted with the user by the service.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ssh_keys",
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("user", "name"),
    )


def downgrade() -> None:
    op.drop_table("ssh_keys")
