"""party schema: users, items, interactions, social links, model artifacts, federation state

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.types.TypeEngine[int]:
    """BIGINT on PostgreSQL, INTEGER (rowid alias) on SQLite."""
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _created() -> sa.Column[object]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
    )


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "users",
        sa.Column("id", _id()),
        sa.Column("external_id", sa.String(255), nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("external_id", name=op.f("uq_users_external_id")),
    )
    op.create_table(
        "items",
        sa.Column("id", _id()),
        sa.Column("external_id", sa.String(255), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=True),
        _created(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_items")),
        sa.UniqueConstraint("external_id", name=op.f("uq_items_external_id")),
    )
    op.create_table(
        "interactions",
        sa.Column("id", _id()),
        sa.Column("user_id", _id(), nullable=False),
        sa.Column("item_id", _id(), nullable=False),
        sa.Column("rating", sa.Float(), nullable=False),
        sa.Column("ts", _id(), nullable=True),
        sa.ForeignKeyConstraint(
            ["item_id"], ["items.id"], name=op.f("fk_interactions_item_id_items")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_interactions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_interactions")),
        sa.UniqueConstraint("user_id", "item_id", name=op.f("uq_interactions_user_id_item_id")),
    )
    op.create_table(
        "social_links",
        sa.Column("id", _id()),
        sa.Column("src_user_id", _id(), nullable=False),
        sa.Column("dst_user_id", _id(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["src_user_id"], ["users.id"], name=op.f("fk_social_links_src_user_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["dst_user_id"], ["users.id"], name=op.f("fk_social_links_dst_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_social_links")),
        sa.UniqueConstraint(
            "src_user_id", "dst_user_id", name=op.f("uq_social_links_src_user_id_dst_user_id")
        ),
    )
    op.create_index(op.f("ix_social_links_dst_user_id"), "social_links", ["dst_user_id"])
    op.create_table(
        "model_artifacts",
        sa.Column("id", _id()),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        _created(),
        sa.Column("payload", sa.LargeBinary(), nullable=True),
        sa.Column("path", sa.String(1024), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_artifacts")),
        sa.UniqueConstraint("name", "version", name=op.f("uq_model_artifacts_name_version")),
    )
    op.create_table(
        "federation_state",
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_federation_state")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("federation_state")
    op.drop_table("model_artifacts")
    op.drop_index(op.f("ix_social_links_dst_user_id"), table_name="social_links")
    op.drop_table("social_links")
    op.drop_table("interactions")
    op.drop_table("items")
    op.drop_table("users")
