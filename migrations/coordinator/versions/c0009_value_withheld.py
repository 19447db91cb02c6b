"""Value withheld: why each party left its validation figures out of a release (a run with dp_epsilon).

Revision ID: c0009
Revises: c0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0009"
down_revision = "c0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("value_withheld", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("value_withheld")
