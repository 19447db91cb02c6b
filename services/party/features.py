"""A party's side information: replace the attributes of a batch of users or items, read them back, erase a user's.

Attributes never leave the party: a run reads them here and turns them into private attribute nodes
(`services.verfedgnn.features`); no route or message carries them to a peer or the coordinator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.data.features import FeatureRow, check_rows
from services.data.parsing import DataFormatError
from services.db.party_tables import Feature
from services.errors import ValidationFailed

Entity = Literal["user", "item"]
DELETE_CHUNK = 500  # ids per DELETE ... IN (...) statement


@dataclass(frozen=True)
class FeatureReport:
    """What a feature upload stored."""

    kind: Entity
    entities: int  # users or items whose attributes the batch replaced
    rows: int  # attribute values stored
    columns: list[str]


def replace_features(*, session: Session, kind: Entity, rows: Sequence[FeatureRow],
                     max_categories: int) -> FeatureReport:
    """Replace the attributes of every entity named in `rows` with `rows`, atomically.

    Refused (ValidationFailed naming the column; nothing stored) when a column, counting what is stored
    already, mixes text and numbers or a categorical has more than `max_categories` distinct values.
    """
    entities = sorted({r.entity_id for r in rows})
    try:
        for lo in range(0, len(entities), DELETE_CHUNK):
            session.execute(delete(Feature).where(Feature.kind == kind,
                                                  Feature.entity_id.in_(entities[lo:lo + DELETE_CHUNK])))
        session.add_all([Feature(kind=kind, entity_id=r.entity_id, name=r.name, text=r.text, number=r.number)
                         for r in rows])
        session.flush()
        try:
            check_rows(load_features(session=session, kind=kind), max_categories=max_categories,
                       source=f"{kind} features")
        except DataFormatError as exc:
            raise ValidationFailed(exc.detail.split(": ", 1)[-1],
                                   extra={"field": f"rows.{exc.field}", "reason": exc.detail}) from exc
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return FeatureReport(kind, len(entities), len(rows), sorted({r.name for r in rows}))


def load_features(*, session: Session, kind: Entity) -> list[FeatureRow]:
    """Every stored attribute value of users (kind "user") or items ("item")."""
    found = session.execute(select(Feature.entity_id, Feature.name, Feature.text, Feature.number)
                            .where(Feature.kind == kind).order_by(Feature.id))
    return [FeatureRow(e, n, t, x) for e, n, t, x in found]


def count_features(*, session: Session, kind: Entity) -> int:
    """How many attribute values of `kind` the party holds."""
    return int(session.scalar(select(func.count()).select_from(Feature).where(Feature.kind == kind)) or 0)


def erase_user_features(*, session: Session, external_id: str) -> int:
    """Delete a user's attribute values (the caller commits); how many there were."""
    done = session.execute(delete(Feature).where(Feature.kind == "user", Feature.entity_id == external_id))
    return int(done.rowcount or 0)  # type: ignore[attr-defined]
