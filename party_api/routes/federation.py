"""Federation API (coordinator credential only): PSI steps, run configuration, round steps, publishing."""

from __future__ import annotations

import threading
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from party_api.deps import AdminDep, CoordinatorDep, SessionDep
from api_common.errors import error_responses
from services.errors import ProtocolError
from services.party import fed_store
from services.party.federation import FederationService
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import FEDERATION_MEDIA_TYPE
from services.protocol.messages import (
    AckResponse,
    ConfigureRequest,
    ConfigureResponse,
    StartRequest,
    StartResponse,
)

_create_lock = threading.Lock()


def get_federation(request: Request) -> FederationService:
    """The app's federation service, created on first use from the app's sessions and settings."""
    state = request.app.state
    with _create_lock:
        if getattr(state, "federation", None) is None:
            s = state.settings
            state.federation = FederationService(sessions=state.sessionmaker, party_id=s.party_id,
                                                 rating_min=s.rating_min, rating_max=s.rating_max)
    return state.federation  # type: ignore[no-any-return]


def require_protocol(x_fedrec_protocol: Annotated[str | None, Header()] = None) -> None:
    """Refuse callers speaking another protocol version."""
    if x_fedrec_protocol != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {x_fedrec_protocol!r} is not supported (this party speaks "
                            f"{PROTOCOL_VERSION!r}; send the X-Fedrec-Protocol header)", extra={"field": "X-Fedrec-Protocol"})


FedDep = Annotated[FederationService, Depends(get_federation)]
Attempt = Annotated[int, Query(ge=0, le=1_000_000)]

router = APIRouter(prefix="/v1/federation", tags=["federation"],
                   dependencies=[CoordinatorDep, Depends(require_protocol)],
                   responses=error_responses(401, 403, 404, 409, 422))


def _octets(data: bytes) -> Response:
    return Response(content=data, media_type=FEDERATION_MEDIA_TYPE)


@router.post("/runs/{run_id}/psi/start", response_class=Response)
async def psi_start(run_id: str, fed: FedDep) -> Response:
    """Step 1 of PSI: this party's singly-blinded user list (32-byte points)."""
    return _octets(await run_in_threadpool(fed.psi_start, run_id=run_id))


@router.post("/runs/{run_id}/psi/reblind", response_class=Response)
async def psi_reblind(run_id: str, request: Request, fed: FedDep) -> Response:
    """Ring step of PSI: raise another party's points to this party's secret."""
    body = await request.body()
    return _octets(await run_in_threadpool(fed.psi_reblind, run_id=run_id, body=body))


class PsiFinishResponse(BaseModel):
    """Size of the aligned user set."""

    n_users: int


@router.post("/runs/{run_id}/psi/finish", response_model=PsiFinishResponse)
async def psi_finish(run_id: str, request: Request, fed: FedDep) -> PsiFinishResponse:
    """Last PSI step: map the intersection tokens to own users and store the alignment."""
    body = await request.body()
    return PsiFinishResponse(n_users=await run_in_threadpool(fed.psi_finish, run_id=run_id, body=body))


@router.post("/runs/{run_id}/configure", response_model=ConfigureResponse)
def configure(run_id: str, body: ConfigureRequest, fed: FedDep) -> ConfigureResponse:
    """Open a run: engine config and seed; answers M_p and training-rating sums."""
    if body.run_id != run_id:
        raise ProtocolError("run_id in body and path differ", extra={"field": "run_id"})
    return fed.configure(request=body)


@router.post("/runs/{run_id}/start", response_model=StartResponse)
def start(run_id: str, body: StartRequest, fed: FedDep) -> StartResponse:
    """Build (or restore) the trainer with the public totals."""
    return fed.start(run_id=run_id, request=body)


@router.post("/runs/{run_id}/rounds/{round_index}/begin", response_model=AckResponse)
async def begin(run_id: str, round_index: int, attempt: Attempt, request: Request, fed: FedDep) -> AckResponse:
    """Public parameters down (npz); a repeated call is answered from the cache."""
    body = await request.body()
    cached = await run_in_threadpool(fed.begin, run_id=run_id, round_index=round_index, attempt=attempt, body=body)
    return AckResponse(cached=cached)


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/projection", response_class=Response)
async def projection(run_id: str, round_index: int, layer: int, attempt: Attempt, fed: FedDep) -> Response:
    """Y_p^k = Φ X_p^k up (npy float32 (q, D))."""
    return _octets(await run_in_threadpool(fed.projection, run_id=run_id, round_index=round_index,
                                           attempt=attempt, layer=layer))


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/others", response_model=AckResponse)
async def others(run_id: str, round_index: int, layer: int, attempt: Attempt, request: Request,
                 fed: FedDep) -> AckResponse:
    """The relayed sum of the other parties' projections down (npy)."""
    body = await request.body()
    cached = await run_in_threadpool(fed.others, run_id=run_id, round_index=round_index, attempt=attempt,
                                     layer=layer, body=body)
    return AckResponse(cached=cached)


@router.post("/runs/{run_id}/rounds/{round_index}/finish", response_class=Response)
async def finish(run_id: str, round_index: int, attempt: Attempt, fed: FedDep) -> Response:
    """Quantized sparse gradients + metric sums up (binary)."""
    return _octets(await run_in_threadpool(fed.finish, run_id=run_id, round_index=round_index, attempt=attempt))


class PublishRequest(BaseModel):
    """Publish the latest completed model for serving."""

    model_config = ConfigDict(extra="forbid")
    round_index: int = Field(ge=0)


class PublishResponse(BaseModel):
    """Version of the stored serving model."""

    version: int


@router.post("/runs/{run_id}/publish", response_model=PublishResponse)
def publish(run_id: str, body: PublishRequest, fed: FedDep) -> PublishResponse:
    """Store the serving model of the run."""
    return PublishResponse(version=fed.publish(run_id=run_id, round_index=body.round_index))


class SplitRow(BaseModel):
    """A held-out rating: (user, item) scored on `split` instead of trained on."""

    model_config = ConfigDict(extra="forbid")
    user_id: str = Field(min_length=1, max_length=255)
    item_id: str = Field(min_length=1, max_length=255)
    split: Literal["train", "valid", "test"]


class SplitRequest(BaseModel):
    """Evaluation labels (replace earlier labels; unlabelled ratings are training ratings)."""

    model_config = ConfigDict(extra="forbid")
    rows: list[SplitRow] = Field(max_length=5_000_000)


class SplitResponse(BaseModel):
    """How many labels are stored."""

    rows: int


admin_router = APIRouter(prefix="/v1/evaluation-split", tags=["evaluation"], dependencies=[AdminDep],
                         responses=error_responses(401, 403, 422))


@admin_router.put("", response_model=SplitResponse)
def put_split(body: SplitRequest, session: SessionDep) -> SplitResponse:
    """Label which stored ratings are validation/test ratings (admin)."""
    rows = body.rows
    n = fed_store.set_evaluation_split(session=session, users=[r.user_id for r in rows],
                                       items=[r.item_id for r in rows], splits=[r.split for r in rows])
    return SplitResponse(rows=n)
