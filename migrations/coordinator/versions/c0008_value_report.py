"""Value report: what each party gains, per slice of its users, on the release's validation split.

Revision ID: c0008
Revises: c0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0008"
down_revision = "c0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("value_report", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("value_report")
