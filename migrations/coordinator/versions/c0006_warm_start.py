"""Warm start: the release a run (and so its release) started from.

Revision ID: c0006
Revises: c0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0006"
down_revision = "c0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("warm_start_from", sa.String(64), nullable=True))
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("warm_start_from", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("warm_start_from")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("warm_start_from")
