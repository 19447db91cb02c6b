"""features: side information (user and item attributes) a party holds

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "features",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite")),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("entity_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("text", sa.String(255), nullable=True),
        sa.Column("number", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_features")),
    )
    op.create_index(op.f("ix_features_kind_entity_id"), "features", ["kind", "entity_id"])


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index(op.f("ix_features_kind_entity_id"), table_name="features")
    op.drop_table("features")
