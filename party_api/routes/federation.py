"""Federation API (coordinator credential only): PSI steps, run configuration, round steps, publishing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api_common.errors import error_responses
from api_common.params import LayerPath, NamePath, RoundPath
from api_common.guard import body_class
from party_api.deps import AdminDep, CacheDep, CoordinatorDep, FedDep, ProtocolDep, SessionDep
from party_api.schemas import (
    PsiFinishResponse,
    PublishRequest,
    PublishResponse,
    SplitRequest,
    SplitResponse,
)
from services.errors import ProtocolError
from services.party import fed_store
from services.protocol.federation import FEDERATION_MEDIA_TYPE
from services.verfedgnn.messages import (
    AckResponse,
    ConfigureRequest,
    ConfigureResponse,
    MaskedStepRequest,
    PeersRequest,
    PeersResponse,
    RecoveryRequest,
    StartRequest,
    StartResponse,
)

Attempt = Annotated[int, Query(ge=0, le=1_000_000)]
FEDERATION, SMALL = body_class("federation"), body_class("small")  # body-size classes (413 past them)

router = APIRouter(prefix="/v1/federation", tags=["federation"],
                   dependencies=[CoordinatorDep, ProtocolDep],
                   responses=error_responses(401, 403, 404, 409, 422))


def _octets(data: bytes) -> Response:
    return Response(content=data, media_type=FEDERATION_MEDIA_TYPE)


@router.post("/runs/{run_id}/psi/start", response_class=Response)
async def psi_start(run_id: NamePath, fed: FedDep) -> Response:
    """Step 1 of PSI: this party's singly-blinded user list (32-byte points)."""
    return _octets(await run_in_threadpool(fed.psi_start, run_id=run_id))


@router.post("/runs/{run_id}/psi/reblind", response_class=Response, openapi_extra=FEDERATION)
async def psi_reblind(run_id: NamePath, request: Request, fed: FedDep) -> Response:
    """Ring step of PSI: raise another party's points to this party's secret."""
    body = await request.body()
    return _octets(await run_in_threadpool(fed.psi_reblind, run_id=run_id, body=body))


@router.post("/runs/{run_id}/psi/finish", response_model=PsiFinishResponse, openapi_extra=FEDERATION)
async def psi_finish(run_id: NamePath, request: Request, fed: FedDep) -> PsiFinishResponse:
    """Last PSI step: map the intersection tokens to own users and store the alignment."""
    body = await request.body()
    return PsiFinishResponse(n_users=await run_in_threadpool(fed.psi_finish, run_id=run_id, body=body))


@router.post("/runs/{run_id}/configure", response_model=ConfigureResponse, openapi_extra=SMALL)
def configure(run_id: NamePath, body: ConfigureRequest, fed: FedDep) -> ConfigureResponse:
    """Open a run: engine config and seed; answers M_p and training-rating sums."""
    if body.run_id != run_id:
        raise ProtocolError("run_id in body and path differ", extra={"field": "run_id"})
    return fed.configure(request=body)


@router.post("/runs/{run_id}/peers", response_model=PeersResponse, openapi_extra=SMALL)
def peers(run_id: NamePath, body: PeersRequest, fed: FedDep) -> PeersResponse:
    """Every party's signed X25519 key (relayed); answers this party's seed contribution sealed per peer."""
    return fed.peers(run_id=run_id, request=body)


@router.post("/runs/{run_id}/start", response_model=StartResponse, openapi_extra=SMALL)
def start(run_id: NamePath, body: StartRequest, fed: FedDep) -> StartResponse:
    """Build (or restore) the trainer with the public totals."""
    return fed.start(run_id=run_id, request=body)


@router.post("/runs/{run_id}/rounds/{round_index}/begin", response_model=AckResponse,
             openapi_extra=FEDERATION)
async def begin(run_id: NamePath, round_index: RoundPath, attempt: Attempt, request: Request, fed: FedDep) -> AckResponse:
    """Public parameters down (npz); a repeated call is answered from the cache."""
    body = await request.body()
    cached = await run_in_threadpool(fed.begin, run_id=run_id, round_index=round_index, attempt=attempt, body=body)
    return AckResponse(cached=cached)


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/projection", response_class=Response)
async def projection(run_id: NamePath, round_index: RoundPath, layer: LayerPath, attempt: Attempt, fed: FedDep) -> Response:
    """Y_p^k = Φ X_p^k up (npy float32 (q, D))."""
    return _octets(await run_in_threadpool(fed.projection, run_id=run_id, round_index=round_index,
                                           attempt=attempt, layer=layer))


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/others", response_model=AckResponse,
             openapi_extra=FEDERATION)
async def others(run_id: NamePath, round_index: RoundPath, layer: LayerPath, attempt: Attempt, request: Request,
                 fed: FedDep) -> AckResponse:
    """The relayed sum of the other parties' projections down (npy)."""
    body = await request.body()
    cached = await run_in_threadpool(fed.others, run_id=run_id, round_index=round_index, attempt=attempt,
                                     layer=layer, body=body)
    return AckResponse(cached=cached)


@router.post("/runs/{run_id}/rounds/{round_index}/finish", response_class=Response)
async def finish(run_id: NamePath, round_index: RoundPath, attempt: Attempt, fed: FedDep) -> Response:
    """Quantized sparse gradients + metric sums up (binary)."""
    return _octets(await run_in_threadpool(fed.finish, run_id=run_id, round_index=round_index, attempt=attempt))


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/masked", response_class=Response,
             openapi_extra=SMALL)
async def masked_projection(run_id: NamePath, round_index: RoundPath, layer: LayerPath, attempt: Attempt,
                            body: MaskedStepRequest,
                            fed: FedDep) -> Response:
    """Secure aggregation: Y_p^k in fixed point plus pairwise masks up (npy uint64)."""
    return _octets(await run_in_threadpool(fed.masked_projection, run_id=run_id, round_index=round_index,
                                           attempt=attempt, layer=layer, participants=body.participants))


@router.post("/runs/{run_id}/rounds/{round_index}/layers/{layer}/total", response_model=AckResponse,
             openapi_extra=FEDERATION)
async def total(run_id: NamePath, round_index: RoundPath, layer: LayerPath, attempt: Attempt, request: Request,
                fed: FedDep) -> AckResponse:
    """Secure aggregation: the unmasked sum of the participants' projections and their names down (npz)."""
    body = await request.body()
    cached = await run_in_threadpool(fed.total, run_id=run_id, round_index=round_index, attempt=attempt,
                                     layer=layer, body=body)
    return AckResponse(cached=cached)


@router.post("/runs/{run_id}/rounds/{round_index}/masked-finish", response_class=Response,
             openapi_extra=SMALL)
async def masked_finish(run_id: NamePath, round_index: RoundPath, attempt: Attempt, body: MaskedStepRequest,
                        fed: FedDep) -> Response:
    """Secure aggregation: gradients, loss and metric sums in fixed point plus pairwise masks up (npy uint64)."""
    return _octets(await run_in_threadpool(fed.masked_finish, run_id=run_id, round_index=round_index,
                                           attempt=attempt, participants=body.participants))


@router.post("/runs/{run_id}/rounds/{round_index}/recovery", response_class=Response,
             openapi_extra=SMALL)
async def recovery(run_id: NamePath, round_index: RoundPath, attempt: Attempt, body: RecoveryRequest,
                   fed: FedDep) -> Response:
    """Secure aggregation: this party's step masks with parties that dropped out (npy uint64)."""
    return _octets(await run_in_threadpool(fed.recovery, run_id=run_id, round_index=round_index, attempt=attempt,
                                           step=body.step, layer=body.layer, dropped=body.dropped, size=body.size))


@router.post("/runs/{run_id}/publish", response_model=PublishResponse, openapi_extra=SMALL)
def publish(run_id: NamePath, body: PublishRequest, fed: FedDep, cache: CacheDep) -> PublishResponse:
    """Store the serving model of the run."""
    version = fed.publish(run_id=run_id, round_index=body.round_index)
    cache.refresh()  # this process serves the new model from the answer on
    return PublishResponse(version=version)


admin_router = APIRouter(prefix="/v1/evaluation-split", tags=["evaluation"], dependencies=[AdminDep],
                         responses=error_responses(401, 403, 422))


@admin_router.put("", response_model=SplitResponse)
def put_split(body: SplitRequest, session: SessionDep) -> SplitResponse:
    """Label which stored ratings are validation/test ratings (admin)."""
    rows = body.rows
    n = fed_store.set_evaluation_split(session=session, users=[r.user_id for r in rows],
                                       items=[r.item_id for r in rows], splits=[r.split for r in rows])
    return SplitResponse(rows=n)
