"""Per-user admin routes: register customer ids, inspect (admin token) and erase (admin token, or the coordinator's federation-wide erasure)."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from api_common.params import IdPath
from party_api.deps import (
    AdminDep,
    AdminOrCoordinatorDep,
    CacheDep,
    FedDep,
    SessionDep,
    SocialOrNoneDep,
)
from party_api.schemas import ErasureRead, UserBatchCreate, UserRead, UsersRegistered
from services.party import catalog, erasure

router = APIRouter(prefix="/v1/users", tags=["users"])
ERRORS = error_responses(401, 403, 404, 422)


@router.post("", response_model=UsersRegistered, responses=error_responses(401, 403, 409, 422),
             dependencies=[AdminDep])
def register_users(body: UserBatchCreate, session: SessionDep) -> catalog.Registration:
    """Register known customer ids without interactions (idempotent); they take part in PSI like any other user."""
    return catalog.register_users(session=session, external_ids=body.user_ids)


@router.get("/{external_id}", response_model=UserRead, responses=ERRORS, dependencies=[AdminDep])
def get_user(external_id: IdPath, session: SessionDep) -> catalog.UserRecord:
    """What this party holds about one user (counts only)."""
    return catalog.get_user(session=session, external_id=external_id)


@router.delete("/{external_id}", response_model=ErasureRead, responses=ERRORS, dependencies=[AdminOrCoordinatorDep])
def erase_user(external_id: IdPath, session: SessionDep, fed: FedDep, cache: CacheDep,
               social: SocialOrNoneDep) -> erasure.Erasure:
    """Right to erasure: remove the user from every table, the serving model, alignments and the evaluation split."""
    return erasure.erase_user(session=session, external_id=external_id, federation=fed, cache=cache, social=social)
