"""Erasure across the federation (admin token): every party's DELETE /v1/users/{id}, one outcome each."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from api_common.params import IdPath
from coordinator_api.deps import AdminDep, FanoutDep, SessionDep
from coordinator_api.schemas import FederatedErasure

router = APIRouter(prefix="/v1/users", tags=["users"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 422))


@router.delete("/{user_id}", response_model=FederatedErasure)
def erase_user(user_id: IdPath, session: SessionDep, fanout: FanoutDep) -> FederatedErasure:
    """Right to erasure at every party; `complete` is false while some party may still hold the user."""
    return FederatedErasure(**fanout.erase_user(session=session, user_id=user_id))
