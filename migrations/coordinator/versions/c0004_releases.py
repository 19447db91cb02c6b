"""Releases: the serving model of each completed run, its pooled validation figures and its state.

Revision ID: c0004
Revises: c0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0004"
down_revision = "c0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "releases",
        sa.Column("release_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False, unique=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False,
                  unique=True),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("valid_rmse", sa.Float(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("party_ids", sa.JSON(), nullable=False),
        sa.Column("staged", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_releases_state", "releases", ["state"])


def downgrade() -> None:
    op.drop_index("ix_releases_state", table_name="releases")
    op.drop_table("releases")
