"""Coordinator schema: parties, runs, rounds, checkpoints.

Revision ID: c0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "parties",
        sa.Column("party_id", sa.String(64), primary_key=True),
        sa.Column("url", sa.String(512), nullable=False),
        sa.Column("token", sa.String(512), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("party_ids", sa.JSON(), nullable=False),
        sa.Column("rounds_total", sa.Integer(), nullable=False),
        sa.Column("rounds_done", sa.Integer(), nullable=False),
        sa.Column("min_parties", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("n_users", sa.Integer(), nullable=True),
        sa.Column("bytes_sent", sa.JSON(), nullable=False),
        sa.Column("bytes_received", sa.JSON(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "rounds",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("round_index", sa.Integer(), primary_key=True),
        sa.Column("participants", sa.JSON(), nullable=False),
        sa.Column("failures", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("bytes_sent", sa.JSON(), nullable=False),
        sa.Column("bytes_received", sa.JSON(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("round_index", sa.Integer(), primary_key=True),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    for name in ("checkpoints", "rounds", "runs", "parties"):
        op.drop_table(name)
