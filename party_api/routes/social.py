"""Social-product routes (P4GCN) on a party with role "social"; coordinator/peer credential only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from api_common.errors import error_responses
from api_common.params import NamePath
from api_common.guard import body_class
from party_api.deps import CoordinatorDep, SocialBodyDep, SocialDep
from services.protocol.social import SOCIAL_MEDIA_TYPE, SocialSessionCreate, SocialSessionRead

router = APIRouter(prefix="/v1/social", tags=["social"], dependencies=[CoordinatorDep],
                   responses=error_responses(401, 403, 404, 409, 413, 422))
SOCIAL = body_class("social")  # encrypted chunks: PARTY_SOCIAL_MAX_BODY_BYTES


@router.get("/budget", response_model=dict[str, Any])
def budget(social: SocialDep) -> dict[str, Any]:
    """The social graph's lifetime privacy ledger: ε and δ reserved by every session so far, and what remains."""
    return social.budget_summary()


def _octets(data: bytes) -> Response:
    return Response(content=data, media_type=SOCIAL_MEDIA_TYPE)


def _read(sid: str, party: Any) -> SocialSessionRead:
    return SocialSessionRead(session_id=sid, n_users=party.n_users, dim=party.config.dim,
                             privacy=party.privacy_record())


@router.post("/sessions", response_model=SocialSessionRead, status_code=201, openapi_extra=body_class("small"))
def open_session(body: SocialSessionCreate, social: SocialDep) -> SocialSessionRead:
    """Open a session: L_sym over the aligned users, fresh frozen W_P2, DP noise calibrated to the plan.

    The session's (ε, δ) is reserved in the party's lifetime ledger first: 409 when it does not fit,
    403 for a noise-free session unless the party allows them."""
    sid, party = social.open(request=body)
    return _read(sid, party)


@router.post("/sessions/{session_id}/epochs", response_model=dict[str, Any])
def begin_epoch(session_id: NamePath, social: SocialDep) -> dict[str, Any]:
    """Start an epoch; [X] must be uploaded again before the next product."""
    return social.begin_epoch(session_id=session_id)


@router.put("/sessions/{session_id}/x", status_code=204, response_class=Response, openapi_extra=SOCIAL)
async def upload_x(session_id: NamePath, social: SocialDep, body: SocialBodyDep,
                   offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> Response:
    """Upload rows [offset, offset + rows) of [X] (EncryptedMatrix bytes)."""
    await run_in_threadpool(social.upload_x, session_id=session_id, offset=offset, body=body)
    return Response(status_code=204)


@router.post("/sessions/{session_id}/forward", response_class=Response, openapi_extra=SOCIAL)
async def forward(session_id: NamePath, social: SocialDep, body: SocialBodyDep) -> Response:
    """Packed [(B L_sym) X W_P2 + Z] for the posted .npy user batch (409 once the budget is spent)."""
    return _octets(await run_in_threadpool(social.forward, session_id=session_id, body=body))


@router.post("/sessions/{session_id}/backward", response_class=Response, openapi_extra=SOCIAL)
async def backward(session_id: NamePath, social: SocialDep, body: SocialBodyDep) -> Response:
    """Packed [(B L_sym B^T) G W_P2^T + Z'] for the framed (users, [G]) body."""
    return _octets(await run_in_threadpool(social.backward, session_id=session_id, body=body))


@router.post("/sessions/{session_id}/x/updates", status_code=204, response_class=Response,
             openapi_extra=SOCIAL)
async def update_x(session_id: NamePath, social: SocialDep, body: SocialBodyDep) -> Response:
    """[X_B] += [dX_B] for the framed (users, [dX]) body."""
    await run_in_threadpool(social.update, session_id=session_id, body=body)
    return Response(status_code=204)


@router.get("/sessions/{session_id}/privacy", response_model=dict[str, Any])
def privacy(session_id: NamePath, social: SocialDep) -> dict[str, Any]:
    """Epsilon spent, delta, sigma, clipping norm, batches served."""
    return social.privacy(session_id=session_id)
