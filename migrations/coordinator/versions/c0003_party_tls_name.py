"""Coordinator schema: each party's pinned TLS name (the SAN its certificate must carry).

Revision ID: c0003
Revises: c0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0003"
down_revision = "c0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("parties") as batch:
        batch.add_column(sa.Column("tls_name", sa.String(253), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("parties") as batch:
        batch.drop_column("tls_name")
