"""node_certs.ca_sha256 and node_certs.key_sha256: certificate renewal and CA rotation

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 03:00:00.000000

``ca_sha256``: the public-key hash of the CA that signed the certificate. A CA rotation's finish
revokes every certificate the old CA signed and refuses to drop it while a node has no certificate
of the new one; NULL (a certificate recorded before this revision) was signed by the CA the
server had then, never by a staged one. ``key_sha256``: the public-key hash of the node's key the
certificate certifies: an agent whose renewal answer was lost asks again with the same new key,
and that is how the server knows the newest certificate is already its own (docs/cluster.md,
"Certificate renewal").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("node_certs", sa.Column("ca_sha256", sa.String(64), nullable=True))
    op.add_column("node_certs", sa.Column("key_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_certs") as batch:
        batch.drop_column("key_sha256")
        batch.drop_column("ca_sha256")
