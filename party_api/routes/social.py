"""Social-product routes (P4GCN) on a party with role "social"; coordinator/peer credential only."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from party_api.deps import CoordinatorDep
from api_common.errors import ApiError, error_responses
from services.party.social_service import SocialBudget, SocialService
from services.protocol.social import SOCIAL_MEDIA_TYPE, SocialSessionCreate, SocialSessionRead

MAX_BODY_BYTES = 64 << 20  # one X chunk of 256 rows x 64 cols at 3072 bits is ~12.6 MB
_create_lock = threading.Lock()


def get_social(request: Request) -> SocialService:
    """The app's social service (created on first use); 404 unless this party holds the social graph."""
    state = request.app.state
    if state.settings.role != "social":
        raise ApiError(404, "not_found", "this party does not hold a social graph (role != social)")
    with _create_lock:
        if getattr(state, "social", None) is None:
            min_bits = 512 if state.settings.dev_mode else 2048  # small keys only in dev/test
            s = state.settings
            budget = SocialBudget(epsilon_total=s.social_epsilon_total, delta_total=s.social_delta_total,
                                  allow_no_dp=s.social_allow_no_dp)
            state.social = SocialService(sessions=state.sessionmaker, min_key_bits=min_bits, budget=budget)
    return state.social  # type: ignore[no-any-return]


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 past the limit (checked on the header and on the stream)."""
    limit = int(getattr(request.app.state, "social_max_body_bytes", MAX_BODY_BYTES))
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
        chunks.append(part)
    if size == 0:
        raise ApiError(422, "validation_failed", "empty body")
    return b"".join(chunks)


SocialDep = Annotated[SocialService, Depends(get_social)]
BodyDep = Annotated[bytes, Depends(read_body)]

router = APIRouter(prefix="/v1/social", tags=["social"], dependencies=[CoordinatorDep],
                   responses=error_responses(401, 403, 404, 409, 413, 422))


@router.get("/budget", response_model=dict[str, Any])
def budget(social: SocialDep) -> dict[str, Any]:
    """The social graph's lifetime privacy ledger: ε and δ reserved by every session so far, and what remains."""
    return social.budget_summary()


def _octets(data: bytes) -> Response:
    return Response(content=data, media_type=SOCIAL_MEDIA_TYPE)


def _read(sid: str, party: Any) -> SocialSessionRead:
    return SocialSessionRead(session_id=sid, n_users=party.n_users, dim=party.config.dim,
                             privacy=party.privacy_record())


@router.post("/sessions", response_model=SocialSessionRead, status_code=201)
def open_session(body: SocialSessionCreate, social: SocialDep) -> SocialSessionRead:
    """Open a session: L_sym over the aligned users, fresh frozen W_P2, DP noise calibrated to the plan.

    The session's (ε, δ) is reserved in the party's lifetime ledger first: 409 when it does not fit,
    403 for a noise-free session unless the party allows them."""
    sid, party = social.open(request=body)
    return _read(sid, party)


@router.post("/sessions/{session_id}/epochs", response_model=dict[str, Any])
def begin_epoch(session_id: str, social: SocialDep) -> dict[str, Any]:
    """Start an epoch; [X] must be uploaded again before the next product."""
    return social.begin_epoch(session_id=session_id)


@router.put("/sessions/{session_id}/x", status_code=204, response_class=Response)
async def upload_x(session_id: str, social: SocialDep, body: BodyDep,
                   offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> Response:
    """Upload rows [offset, offset + rows) of [X] (EncryptedMatrix bytes)."""
    await run_in_threadpool(social.upload_x, session_id=session_id, offset=offset, body=body)
    return Response(status_code=204)


@router.post("/sessions/{session_id}/forward", response_class=Response)
async def forward(session_id: str, social: SocialDep, body: BodyDep) -> Response:
    """Packed [(B L_sym) X W_P2 + Z] for the posted .npy user batch (409 once the budget is spent)."""
    return _octets(await run_in_threadpool(social.forward, session_id=session_id, body=body))


@router.post("/sessions/{session_id}/backward", response_class=Response)
async def backward(session_id: str, social: SocialDep, body: BodyDep) -> Response:
    """Packed [(B L_sym B^T) G W_P2^T + Z'] for the framed (users, [G]) body."""
    return _octets(await run_in_threadpool(social.backward, session_id=session_id, body=body))


@router.post("/sessions/{session_id}/x/updates", status_code=204, response_class=Response)
async def update_x(session_id: str, social: SocialDep, body: BodyDep) -> Response:
    """[X_B] += [dX_B] for the framed (users, [dX]) body."""
    await run_in_threadpool(social.update, session_id=session_id, body=body)
    return Response(status_code=204)


@router.get("/sessions/{session_id}/privacy", response_model=dict[str, Any])
def privacy(session_id: str, social: SocialDep) -> dict[str, Any]:
    """Epsilon spent, delta, sigma, clipping norm, batches served."""
    return social.privacy(session_id=session_id)
