"""Recommendation fan-out (X-API-Key): ask every party for its top-K and merge by score."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from api_common.errors import error_responses
from coordinator_api.deps import ApiKeyDep, ManagerDep, SessionDep
from services.coordinator.fanout import merged_recommendations

router = APIRouter(prefix="/v1/users", tags=["recommendations"], dependencies=[ApiKeyDep],
                   responses=error_responses(401, 403, 404, 422, 502))


class MergedItem(BaseModel):
    """An item, the party that holds it and its predicted rating (or popularity count)."""

    party_id: str
    item_id: str
    score: float
    fallback: str | None


class MergedRecommendations(BaseModel):
    """Top-K across every party's catalogue; parties that could not answer are listed."""

    user_id: str
    items: list[MergedItem]
    unavailable: dict[str, str]


@router.get("/{user_id}/recommendations", response_model=MergedRecommendations)
def recommendations(user_id: str, session: SessionDep, manager: ManagerDep,
                    k: Annotated[int, Query(ge=1, le=1000)] = 10) -> MergedRecommendations:
    """Merge the parties' top-k lists for a user (predicted ratings first, popularity fallbacks after)."""
    return MergedRecommendations(**merged_recommendations(session=session, manager=manager, user_id=user_id, k=k))
