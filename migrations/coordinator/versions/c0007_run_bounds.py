"""Bounded runs: a run's time limit, and whether a cancelled or timed-out run publishes its best round.

Revision ID: c0007
Revises: c0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0007"
down_revision = "c0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("max_minutes", sa.Float(), nullable=True))
        batch.add_column(sa.Column("publish_on_stop", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("publish_on_stop")
        batch.drop_column("max_minutes")
