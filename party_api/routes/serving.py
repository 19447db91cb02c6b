"""Serving API (X-API-Key, or the coordinator's credential for fan-out): predictions and top-K."""

from __future__ import annotations

import hmac
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field

from party_api.deps import (
    SessionDep,
    SettingsDep,
    api_key_scheme,
    coordinator_scheme,
    require_api_key,
)
from api_common.errors import error_responses
from services.party import serving
from services.party.serving import ModelCache

_create_lock = threading.Lock()


def get_cache(request: Request) -> ModelCache:
    """The app's serving-model cache (created on first use)."""
    with _create_lock:
        if getattr(request.app.state, "model_cache", None) is None:
            request.app.state.model_cache = ModelCache()
    return request.app.state.model_cache  # type: ignore[no-any-return]


def require_serving_caller(
    settings: SettingsDep, key: Annotated[str | None, Security(api_key_scheme)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)],
) -> None:
    """An app's X-API-Key, or the coordinator's bearer credential (recommendation fan-out)."""
    token = bearer.credentials if bearer else None
    if token and not key and hmac.compare_digest(token.encode(), (settings.coordinator_token or "").encode()):
        return
    require_api_key(settings, key)


CacheDep = Annotated[ModelCache, Depends(get_cache)]
router = APIRouter(prefix="/v1", tags=["serving"], dependencies=[Depends(require_serving_caller)],
                   responses=error_responses(401, 403, 404, 409, 422))


class PairIn(BaseModel):
    """One (user, item) pair to score."""

    model_config = ConfigDict(extra="forbid")
    user_id: str = Field(min_length=1, max_length=255)
    item_id: str = Field(min_length=1, max_length=255)


class PredictionRequest(BaseModel):
    """A batch of pairs (items of this party)."""

    model_config = ConfigDict(extra="forbid")
    pairs: list[PairIn] = Field(min_length=1, max_length=10_000)


class PredictionOut(BaseModel):
    """A predicted rating; `fallback` is "popularity" for a user the model was not trained on."""

    user_id: str
    item_id: str
    rating: float
    fallback: str | None


class PredictionResponse(BaseModel):
    """Predictions in request order."""

    predictions: list[PredictionOut]


class RecommendedItem(BaseModel):
    """An item and its score (predicted rating, or rating count for the popularity fallback)."""

    item_id: str
    score: float


class RecommendationResponse(BaseModel):
    """Top-K of this party's catalogue that the user has not rated."""

    user_id: str
    items: list[RecommendedItem]
    fallback: str | None
    model_version: int
    run_id: str


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
