"""Serving API (X-API-Key, or the coordinator's credential for fan-out): predictions and top-K.

Handlers are async and hand the numpy work to the serving cache's own small executor: the event
loop never blocks on it, and a few scoring threads beat forty that fight over the GIL.
Dicts are returned so FastAPI validates the answer once, against response_model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import IdPath
from party_api.deps import CacheDep, ServingCallerDep
from party_api.schemas import PredictionRequest, PredictionResponse, RecommendationResponse
from services.party import serving

router = APIRouter(prefix="/v1", tags=["serving"], dependencies=[ServingCallerDep],
                   responses=error_responses(401, 403, 404, 409, 422))


UnknownQuery = Annotated[Literal["error", "skip"], Query(
    description="error: 404 naming the first pair with an unknown id; skip: answer the known pairs, list the others")]


@router.post("/predictions", response_model=PredictionResponse, openapi_extra=body_class("predictions"))
async def predict(body: PredictionRequest, cache: CacheDep, unknown: UnknownQuery = "error") -> dict[str, Any]:
    """Predicted ratings for a batch of (user, item) pairs from the latest completed model."""
    pairs = [(p.user_id, p.item_id) for p in body.pairs]
    if unknown == "skip":
        return await cache.run(lambda: serving.predict_known(snapshot=cache.get(), pairs=pairs))
    return {"predictions": await cache.run(lambda: serving.predict(snapshot=cache.get(), pairs=pairs))}


@router.get("/users/{user_id}/recommendations", response_model=RecommendationResponse)
async def recommend(user_id: IdPath, cache: CacheDep,
                    k: Annotated[int, Query(ge=1, le=serving.MAX_K)] = 10) -> dict[str, Any]:
    """Top-k unrated items of this party's catalogue for a user."""
    return await cache.run(lambda: serving.recommend(snapshot=cache.get(), user_id=user_id, k=k))
