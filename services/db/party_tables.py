"""Tables of a party's own database: users, items, interactions, social links, artifacts, state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from services.db.base import IdType, PartyBase

EXTERNAL_ID_MAX = 255


class User(PartyBase):
    """A user known to this party, by the external id shared across parties."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    external_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_MAX), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Item(PartyBase):
    """An item of this party's catalogue."""

    __tablename__ = "items"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    external_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_MAX), unique=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Interaction(PartyBase):
    """One rating; a re-rating of the same (user, item) updates this row."""

    __tablename__ = "interactions"
    __table_args__ = (UniqueConstraint("user_id", "item_id"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    user_id: Mapped[int] = mapped_column(IdType, ForeignKey("users.id"))
    item_id: Mapped[int] = mapped_column(IdType, ForeignKey("items.id"))
    rating: Mapped[float] = mapped_column(Float)
    ts: Mapped[int | None] = mapped_column(IdType, nullable=True)


class SocialLink(PartyBase):
    """A directed weighted link between two users (held by a social-graph party)."""

    __tablename__ = "social_links"
    __table_args__ = (
        UniqueConstraint("src_user_id", "dst_user_id"),
        Index(None, "dst_user_id"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    src_user_id: Mapped[int] = mapped_column(IdType, ForeignKey("users.id"))
    dst_user_id: Mapped[int] = mapped_column(IdType, ForeignKey("users.id"))
    weight: Mapped[float] = mapped_column(Float, default=1.0)


class ModelArtifact(PartyBase):
    """A stored model artifact (private embeddings, checkpoints): inline bytes or a file path."""

    __tablename__ = "model_artifacts"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    payload: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    path: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)


class FederationState(PartyBase):
    """Key/value state of the federation protocol (run id, round, projection seed, ...)."""

    __tablename__ = "federation_state"

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class PrivacyReservation(PartyBase):
    """(epsilon, delta) reserved from this party's lifetime budget for one session of a mechanism.

    Rows are only ever added: the ledger survives restarts, so a peer cannot reset the budget by
    reopening sessions or by waiting for the service to restart.
    """

    __tablename__ = "privacy_reservations"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    mechanism: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str] = mapped_column(String(64), unique=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Feature(PartyBase):
    """One attribute value of a user or item this party holds (side information; never leaves the party).

    Keyed by the entity's external id, not a row of `users`/`items`: a party may describe users it has no
    interaction of yet, and erasure deletes a user's rows by that id (`services.party.erasure`).
    """

    __tablename__ = "features"
    __table_args__ = (Index(None, "kind", "entity_id"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # "user" or "item"
    entity_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_MAX))
    name: Mapped[str] = mapped_column(String(64))
    text: Mapped[str | None] = mapped_column(String(255), nullable=True)  # a categorical value
    number: Mapped[float | None] = mapped_column(Float, nullable=True)  # a numeric value
