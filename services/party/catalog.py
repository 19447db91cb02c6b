"""Read side of a party's data: counts, summary, per-user view; item upserts (erasure: services.party.erasure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from services.db.party_tables import Interaction, Item, SocialLink, User
from services.db.session import is_write_conflict
from services.errors import Conflict, NotFound
from services.party.serving import mark_changed

ID_CHUNK = 5_000  # ids per statement: below SQLite's bound-parameter limit


@dataclass(frozen=True)
class Counts:
    """Row counts of the party's tables."""

    users: int
    items: int
    interactions: int
    social_links: int


@dataclass(frozen=True)
class Summary:
    """Counts plus the rating histogram and the party's rating scale."""

    party_id: str
    role: str
    counts: Counts
    rating_min: float
    rating_max: float
    rating_histogram: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Registration:
    """What a registration of customer ids did: distinct ids asked, how many were new, how many known."""

    users: int
    created: int
    existing: int


@dataclass(frozen=True)
class UserRecord:
    """What the party holds about one user (counts only)."""

    external_id: str
    interactions: int
    social_links: int


def counts(*, session: Session) -> Counts:
    """Count users, items, interactions and social links."""

    def n(model: Any) -> int:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)

    return Counts(n(User), n(Item), n(Interaction), n(SocialLink))


def summary(
    *, session: Session, party_id: str, role: str, rating_min: float, rating_max: float
) -> Summary:
    """Counts and the rating histogram (rating value as a string key → count)."""
    rows = session.execute(
        select(Interaction.rating, func.count())
        .group_by(Interaction.rating)
        .order_by(Interaction.rating)
    ).all()
    histogram = {_label(rating): int(count) for rating, count in rows}
    return Summary(party_id, role, counts(session=session), rating_min, rating_max, histogram)


def _label(rating: float) -> str:
    """'4' for 4.0, '3.5' for 3.5: JSON object keys are strings."""
    return str(int(rating)) if float(rating).is_integer() else repr(float(rating))


def _user(session: Session, external_id: str) -> User:
    user = session.scalar(select(User).where(User.external_id == external_id))
    if user is None:
        raise NotFound(f"unknown user {external_id!r}", extra={"external_id": external_id})
    return user


def _links_of(user_id: int) -> Any:
    return or_(SocialLink.src_user_id == user_id, SocialLink.dst_user_id == user_id)


def get_user(*, session: Session, external_id: str) -> UserRecord:
    """Counts of what the party holds about a user (404 if unknown)."""
    user = _user(session, external_id)
    n_inter = session.scalar(select(func.count()).where(Interaction.user_id == user.id)) or 0
    n_links = session.scalar(select(func.count()).where(_links_of(user.id))) or 0
    return UserRecord(external_id, int(n_inter), int(n_links))


def upsert_items(*, session: Session, items: Sequence[dict[str, Any]]) -> int:
    """Create or update items with their metadata ({external_id, metadata}); one transaction."""
    if not items:
        return 0
    dialect = session.get_bind().dialect.name
    insert = (sqlite if dialect == "sqlite" else postgresql).insert
    stmt = insert(Item.__table__)  # type: ignore[arg-type]
    stmt = stmt.on_conflict_do_update(
        index_elements=["external_id"], set_={"metadata": stmt.excluded.metadata}
    )
    try:
        session.execute(
            stmt, [{"external_id": i["external_id"], "metadata": i.get("metadata")} for i in items]
        )
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return len(items)


def register_users(*, session: Session, external_ids: Sequence[str]) -> Registration:
    """Register customer ids (with or without interactions) in one transaction; known ids are left as they are."""
    ids = sorted(set(external_ids))
    dialect = session.get_bind().dialect.name
    insert = (sqlite if dialect == "sqlite" else postgresql).insert
    existing = 0
    try:
        for start in range(0, len(ids), ID_CHUNK):
            chunk = ids[start:start + ID_CHUNK]
            existing += int(session.scalar(
                select(func.count()).select_from(User).where(User.external_id.in_(chunk))) or 0)
            stmt = insert(User.__table__).on_conflict_do_nothing(index_elements=["external_id"])  # type: ignore[arg-type]
            session.execute(stmt, [{"external_id": e} for e in chunk])
        mark_changed(session=session)  # serving learns the new users (most-popular fallback until a model has them)
        session.commit()
    except Exception as exc:
        session.rollback()
        if is_write_conflict(exc):
            raise Conflict("the database is busy with a concurrent write; nothing was registered, retry it",
                           extra={"retryable": True}) from exc
        raise
    except BaseException:
        session.rollback()
        raise
    return Registration(len(ids), len(ids) - existing, existing)
