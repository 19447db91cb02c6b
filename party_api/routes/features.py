"""Side information: bulk uploads of user and item attributes (admin only; attributes are never served)."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from party_api.deps import AdminDep, SessionDep, SettingsDep
from party_api.schemas import FeatureBatchCreate, FeatureCountsRead, FeaturesRead
from services.data.features import FeatureRow
from services.party import features
from services.party.features import Entity, FeatureReport

router = APIRouter(prefix="/v1/features", tags=["features"], dependencies=[AdminDep])
ERRORS = error_responses(401, 403, 422)


def _store(body: FeatureBatchCreate, session: SessionDep, settings: SettingsDep, kind: Entity) -> FeatureReport:
    rows = [FeatureRow(str(r.id), r.name, r.text, r.number) for r in body.rows]
    return features.replace_features(session=session, kind=kind, rows=rows,
                                     max_categories=settings.feature_max_categories)


@router.post("/users", response_model=FeaturesRead, responses=ERRORS)
def add_user_features(body: FeatureBatchCreate, session: SessionDep, settings: SettingsDep) -> FeatureReport:
    """Replace the attributes of every user the batch names (all or nothing; PARTY_FEATURE_MAX_CATEGORIES)."""
    return _store(body, session, settings, "user")


@router.post("/items", response_model=FeaturesRead, responses=ERRORS)
def add_item_features(body: FeatureBatchCreate, session: SessionDep, settings: SettingsDep) -> FeatureReport:
    """Replace the attributes of every item the batch names (all or nothing; PARTY_FEATURE_MAX_CATEGORIES)."""
    return _store(body, session, settings, "item")


@router.get("", response_model=FeatureCountsRead, responses=error_responses(401, 403))
def count_features(session: SessionDep) -> FeatureCountsRead:
    """How many attribute values the party holds for users and for items."""
    return FeatureCountsRead(user=features.count_features(session=session, kind="user"),
                             item=features.count_features(session=session, kind="item"))
