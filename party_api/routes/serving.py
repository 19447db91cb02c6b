"""Serving API (X-API-Key, or the coordinator's credential for fan-out): predictions and top-K."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api_common.errors import error_responses
from party_api.deps import CacheDep, ServingCallerDep, SessionDep
from party_api.schemas import (
    PredictionOut,
    PredictionRequest,
    PredictionResponse,
    RecommendationResponse,
)
from services.party import serving

router = APIRouter(prefix="/v1", tags=["serving"], dependencies=[ServingCallerDep],
                   responses=error_responses(401, 403, 404, 409, 422))


@router.post("/predictions", response_model=PredictionResponse)
def predict(body: PredictionRequest, session: SessionDep, cache: CacheDep) -> PredictionResponse:
    """Predicted ratings for a batch of (user, item) pairs from the latest completed model."""
    rows = serving.predict(session=session, cache=cache, pairs=[(p.user_id, p.item_id) for p in body.pairs])
    return PredictionResponse(predictions=[PredictionOut(**r) for r in rows])


@router.get("/users/{user_id}/recommendations", response_model=RecommendationResponse)
def recommend(user_id: str, session: SessionDep, cache: CacheDep,
              k: Annotated[int, Query(ge=1, le=1000)] = 10) -> RecommendationResponse:
    """Top-k unrated items of this party's catalogue for a user."""
    return RecommendationResponse(**serving.recommend(session=session, cache=cache, user_id=user_id, k=k))
