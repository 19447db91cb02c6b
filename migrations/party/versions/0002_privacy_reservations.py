"""privacy reservations: the social party's lifetime (epsilon, delta) ledger

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "privacy_reservations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite")),
        sa.Column("mechanism", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_privacy_reservations")),
        sa.UniqueConstraint("session_id", name=op.f("uq_privacy_reservations_session_id")),
    )
    op.create_index(op.f("ix_privacy_reservations_mechanism"), "privacy_reservations", ["mechanism"])


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index(op.f("ix_privacy_reservations_mechanism"), table_name="privacy_reservations")
    op.drop_table("privacy_reservations")
