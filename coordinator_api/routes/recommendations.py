"""Recommendation fan-out (X-API-Key): ask every party for its top-K and merge by score."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api_common.errors import error_responses
from api_common.params import IdPath
from coordinator_api.deps import ApiKeyDep, ManagerDep, SessionDep
from coordinator_api.schemas import MergedRecommendations
from services.coordinator.fanout import merged_recommendations

router = APIRouter(prefix="/v1/users", tags=["recommendations"], dependencies=[ApiKeyDep],
                   responses=error_responses(401, 403, 404, 422, 502))


@router.get("/{user_id}/recommendations", response_model=MergedRecommendations)
def recommendations(user_id: IdPath, session: SessionDep, manager: ManagerDep,
                    k: Annotated[int, Query(ge=1, le=1000)] = 10) -> MergedRecommendations:
    """Merge the parties' top-k lists for a user (predicted ratings first, popularity fallbacks after)."""
    return MergedRecommendations(**merged_recommendations(session=session, manager=manager, user_id=user_id, k=k))
