"""Serving fan-out (X-API-Key): a user's top-K merged over every party, and predictions of named pairs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import IdPath
from coordinator_api.deps import ApiKeyDep, FanoutDep, SessionDep
from coordinator_api.schemas import MergedPredictions, MergedRecommendations, PredictionRequest

router = APIRouter(prefix="/v1/users", tags=["recommendations"], dependencies=[ApiKeyDep],
                   responses=error_responses(401, 403, 404, 422, 502))
predictions_router = APIRouter(prefix="/v1/predictions", tags=["predictions"], dependencies=[ApiKeyDep],
                               responses=error_responses(401, 403, 422, 502))


@router.get("/{user_id}/recommendations", response_model=MergedRecommendations)
async def recommendations(user_id: IdPath, fanout: FanoutDep,
                          k: Annotated[int, Query(ge=1, le=1000)] = 10) -> dict[str, Any]:
    """Merge the parties' top-k lists for a user (predicted ratings first, popularity fallbacks after)."""
    # async, no session: parties and release come from the fan-out's cached view, the parties are asked
    # over one kept-alive asynchronous client; the dict is validated once, against response_model
    return await fanout.recommendations(user_id=user_id, k=k)


@predictions_router.post("", response_model=MergedPredictions, openapi_extra=body_class("predictions"))
def predict(body: PredictionRequest, session: SessionDep, fanout: FanoutDep) -> MergedPredictions:
    """Predicted ratings of (user, item) pairs, each asked of the party that holds its item, in request order."""
    pairs = [(p.user_id, p.item_id, p.party_id) for p in body.pairs]
    return MergedPredictions(**fanout.predictions(session=session, pairs=pairs))
