"""Serving API (X-API-Key, or the coordinator's credential for fan-out): predictions and top-K.

Handlers are async and hand the numpy work to the serving cache's own small executor: the event
loop never blocks on it, and a few scoring threads beat forty that fight over the GIL. A top-K that
is a slice of the user's precomputed list (services.party.hot_path) is answered on the loop itself.
Dicts are returned so FastAPI validates the answer once, against response_model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import IdPath
from party_api.deps import CacheDep, ServingCallerDep
from party_api.schemas import PredictionRequest, PredictionResponse, RecommendationResponse
from services.errors import ReleaseMismatch
from services.party import serving
from services.party.serving_cache import ModelCache

router = APIRouter(prefix="/v1", tags=["serving"], dependencies=[ServingCallerDep],
                   responses=error_responses(401, 403, 404, 409, 422))


ReleaseQuery = Annotated[str | None, Query(
    pattern=r"^[A-Za-z0-9_.-]{1,64}$",
    description="the release the caller expects (the coordinator's fan-out): 409 release_mismatch when this "
                "party serves another")]


def _snapshot(cache: ModelCache, release: str | None) -> serving.Snapshot:
    """The snapshot to answer from; with an expected release, the current one and a 409 if it differs."""
    snap = cache.get()
    if release is None or snap.release_id == release:
        return snap
    snap = cache.current()
    if snap.release_id != release:
        raise ReleaseMismatch(f"this party serves release {snap.release_id!r}, not {release!r}",
                              extra={"release_id": snap.release_id})
    return snap


UnknownQuery = Annotated[Literal["error", "skip"], Query(
    description="error: 404 naming the first pair with an unknown id; skip: answer the known pairs, list the others")]


@router.post("/predictions", response_model=PredictionResponse, openapi_extra=body_class("predictions"))
async def predict(body: PredictionRequest, cache: CacheDep, unknown: UnknownQuery = "error",
                  release: ReleaseQuery = None) -> dict[str, Any]:
    """Predicted ratings for a batch of (user, item) pairs from the served model (the active release's).

    At an implicit-feedback party (PARTY_FEEDBACK=implicit) the value is not a rating but the ranking score
    s(u, v) = h_u·h_v + c_v that its top-K ranks by (unbounded; higher is better); `score_kind` says which.
    """
    pairs = [(p.user_id, p.item_id) for p in body.pairs]

    def work() -> dict[str, Any]:
        snap = _snapshot(cache, release)
        if unknown == "skip":
            return serving.predict_known(snapshot=snap, pairs=pairs)
        return {"predictions": serving.predict(snapshot=snap, pairs=pairs), "release_id": snap.release_id,
                "score_kind": snap.model.score_kind}
    return await cache.run(work)


@router.get("/users/{user_id}/recommendations", response_model=RecommendationResponse)
async def recommend(user_id: IdPath, request: Request,
                    k: Annotated[int, Query(ge=1, le=serving.MAX_K)] = 10,
                    release: ReleaseQuery = None) -> dict[str, Any]:
    """Top-k unrated items of this party's catalogue for a user."""
    # The cache straight from the app's state, not CacheDep: a dependency level costs this route, the one
    # apps call most, as much again as its own parameters (FastAPI resolves each level's params anew).
    cache: ModelCache = request.app.state.model_cache
    snap = cache.peek()
    if snap is not None and serving.precomputed(snap, k) and (release is None or snap.release_id == release):
        # A slice of the user's precomputed list: microseconds, answered on the event loop (no thread hop).
        return serving.recommend(snapshot=snap, user_id=user_id, k=k)
    return await cache.run(lambda: serving.recommend(snapshot=_snapshot(cache, release), user_id=user_id, k=k))
