"""Resource schemas of the party API (request and response bodies)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

ExternalId = StrictStr | StrictInt
MAX_JSON_ROWS = 50_000


class InteractionCreate(BaseModel):
    """One rating; user and item are external ids."""

    model_config = ConfigDict(extra="forbid")
    user_id: ExternalId
    item_id: ExternalId
    rating: float
    timestamp: int | None = None


class InteractionBatchCreate(BaseModel):
    """A JSON batch of ratings, stored atomically."""

    model_config = ConfigDict(extra="forbid")
    rows: list[InteractionCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class SocialLinkCreate(BaseModel):
    """A directed link between two users with a non-negative weight."""

    model_config = ConfigDict(extra="forbid")
    src_user_id: ExternalId
    dst_user_id: ExternalId
    weight: float = 1.0


class SocialLinkBatchCreate(BaseModel):
    """A JSON batch of social links, stored atomically."""

    model_config = ConfigDict(extra="forbid")
    rows: list[SocialLinkCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class ItemCreate(BaseModel):
    """An item of the catalogue with optional metadata (title, genres, ...)."""

    model_config = ConfigDict(extra="forbid")
    external_id: ExternalId
    metadata: dict[str, Any] | None = None


class ItemBatchCreate(BaseModel):
    """A JSON batch of items."""

    model_config = ConfigDict(extra="forbid")
    rows: list[ItemCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class IngestRead(BaseModel):
    """What a committed ingestion request stored."""

    kind: str
    rows: int
    users: int
    items: int
    seconds: float


class ItemsRead(BaseModel):
    """How many items were created or updated."""

    rows: int


class CountsRead(BaseModel):
    """Row counts of the party's tables."""

    users: int
    items: int
    interactions: int
    social_links: int


class SummaryRead(BaseModel):
    """Counts, rating histogram (rating → count) and rating scale."""

    party_id: str
    role: str
    counts: CountsRead
    rating_min: float
    rating_max: float
    rating_histogram: dict[str, int]


class UserRead(BaseModel):
    """What the party holds about one user (counts only)."""

    external_id: str
    interactions: int
    social_links: int


class ErasureRead(BaseModel):
    """What an erasure removed."""

    external_id: str
    interactions_deleted: int
    social_links_deleted: int


class HealthRead(BaseModel):
    """Liveness / readiness status."""

    status: str
    party_id: str
    detail: str | None = None
