"""Federation API (coordinator credential only): PSI steps, run configuration, round steps, publishing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import NamePath, RoundPath
from party_api.deps import AdminDep, CacheDep, CoordinatorDep, FedDep, ProtocolDep, SessionDep, SettingsDep
from party_api.schemas import (
    KeepBestRequest,
    PreflightResponse,
    PsiFinishResponse,
    PublishRequest,
    PublishResponse,
    ReleaseActivated,
    ReleasesPrune,
    ReleasesPruned,
    SliceValue,
    SplitRequest,
    SplitResponse,
)
from services.errors import ProtocolError
from services.federation.links import Step
from services.federation.messages import (
    ConfigureRequest,
    ConfigureResponse,
    PeersRequest,
    PeersResponse,
    StartRequest,
    StartResponse,
)
from services.federation import registry
from services.party import catalog, fed_store, serving
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import FEDERATION_MEDIA_TYPE

Attempt = Annotated[int, Query(ge=0, le=1_000_000)]
FEDERATION, SMALL = body_class("federation"), body_class("small")  # body-size classes (413 past them)

router = APIRouter(prefix="/v1/federation", tags=["federation"],
                   dependencies=[CoordinatorDep, ProtocolDep],
                   responses=error_responses(401, 403, 404, 409, 422))


def _octets(data: bytes) -> Response:
    return Response(content=data, media_type=FEDERATION_MEDIA_TYPE)


@router.get("/preflight", response_model=PreflightResponse)
def preflight(session: SessionDep, settings: SettingsDep) -> PreflightResponse:
    """Pre-flight: this party answers the coordinator's credential, speaks its protocol version and holds data.

    Only yes/no about the data: counts would tell the coordinator more than a run announces.
    """
    c = catalog.counts(session=session)
    return PreflightResponse(party_id=settings.party_id, protocol_version=PROTOCOL_VERSION,
                             holds_data=c.users > 0 and c.interactions > 0, protocols=sorted(registry.PROTOCOLS))


@router.post("/runs/{run_id}/psi/start", response_class=Response)
async def psi_start(run_id: NamePath, fed: FedDep) -> Response:
    """Step 1 of PSI: this party's singly-blinded user list (32-byte points)."""
    return _octets(await run_in_threadpool(fed.psi_start, run_id=run_id))


@router.post("/runs/{run_id}/psi/reblind", response_class=Response, openapi_extra=FEDERATION)
async def psi_reblind(run_id: NamePath, request: Request, fed: FedDep) -> Response:
    """Ring step of PSI: raise another party's points to this party's secret."""
    await run_in_threadpool(fed.psi_check, run_id=run_id)  # 409 before up to 256 MiB are read
    body = await request.body()
    return _octets(await run_in_threadpool(fed.psi_reblind, run_id=run_id, body=body))


@router.post("/runs/{run_id}/psi/finish", response_model=PsiFinishResponse, openapi_extra=FEDERATION)
async def psi_finish(run_id: NamePath, request: Request, fed: FedDep) -> PsiFinishResponse:
    """Last PSI step: map the intersection tokens to own users and store the alignment."""
    await run_in_threadpool(fed.psi_check, run_id=run_id)  # 409 before the body is read
    body = await request.body()
    return PsiFinishResponse(n_users=await run_in_threadpool(fed.psi_finish, run_id=run_id, body=body))


# user_rows only in a warm run's answer: a cold run's configure answer is what it was before warm starts
@router.post("/runs/{run_id}/configure", response_model=ConfigureResponse, response_model_exclude_none=True,
             openapi_extra=SMALL)
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


StepName = Annotated[str, Path(pattern=r"^((recovery|consistency):)?[a-z][a-z_]{0,31}$",
                                 description="the protocol's step: begin, projection, total, finish, "
                                             "consistency:STEP, recovery:STEP, …")]
LayerQuery = Annotated[int, Query(ge=-1, le=64, description="layer of a per-layer step (-1: none)")]


@router.post("/runs/{run_id}/rounds/{round_index}/steps/{step}", response_class=Response, openapi_extra=FEDERATION)
async def round_step(run_id: NamePath, round_index: RoundPath, step: StepName, attempt: Attempt, request: Request,
                     fed: FedDep, layer: LayerQuery = -1) -> Response:
    """One step of a round, for every protocol: a message tree (npz) in, the party's answer (npz) out.

    The run's protocol answers the step; under secure aggregation its summed steps come back masked.
    A repeated step of the attempt in progress gets the cached answer.
    """
    body = await request.body()
    return _octets(await run_in_threadpool(fed.step, run_id=run_id, step=Step(step, round_index, attempt, layer),
                                           body=body))


@router.post("/runs/{run_id}/best", response_model=PublishResponse, openapi_extra=SMALL)
def keep_best(run_id: NamePath, body: KeepBestRequest, fed: FedDep) -> PublishResponse:
    """Keep the model of the round just finished (the run's best so far), so the release can hold it (409 if
    that round is not this party's latest finished one)."""
    return PublishResponse(version=fed.keep_best(run_id=run_id, round_index=body.round_index))


@router.post("/runs/{run_id}/publish", response_model=PublishResponse, openapi_extra=SMALL)
def publish(run_id: NamePath, body: PublishRequest, fed: FedDep, cache: CacheDep) -> PublishResponse:
    """Store the serving model of the run: served at once, or staged under `release_id` until activated.

    Under whole-run DP the answer carries no validation figures (`withheld` says why)."""
    version, value = fed.publish(run_id=run_id, round_index=body.round_index, release_id=body.release_id)
    if body.release_id is None:
        cache.refresh()  # this process serves the new model from the answer on
    sums = fed.served_valid(run_id=run_id, round_index=body.round_index)
    return PublishResponse(version=version, value=[SliceValue(**row) for row in value],
                           withheld=fed.value_withheld(run_id=run_id),
                           **({} if sums is None else {"valid_sse": sums[0], "valid_count": sums[1]}))


@router.post("/releases/{release_id}/activate", response_model=ReleaseActivated)
def activate_release(release_id: NamePath, session: SessionDep, cache: CacheDep) -> ReleaseActivated:
    """Serve the model staged under a coordinator release (404 when it was not staged here)."""
    version = serving.activate(session=session, release_id=release_id)
    cache.refresh()  # this process at once; the others at their next poll (PARTY_SERVING_REFRESH_S)
    return ReleaseActivated(release_id=release_id, version=version)


@router.post("/releases/prune", response_model=ReleasesPruned, openapi_extra=SMALL)
def prune_releases(body: ReleasesPrune, session: SessionDep, fed: FedDep) -> ReleasesPruned:
    """Retention: delete every release staged here that is not in `keep` (never the active one) with its run's
    trainer snapshots and alignment."""
    pruned, runs = serving.prune_releases(session=session, keep=body.keep)
    fed.forget(runs=runs, psi=False)  # a pruned run's trainer is not kept in memory either
    return ReleasesPruned(pruned=pruned, runs=runs)


admin_router = APIRouter(prefix="/v1/evaluation-split", tags=["evaluation"], dependencies=[AdminDep],
                         responses=error_responses(401, 403, 422))


@admin_router.put("", response_model=SplitResponse)
def put_split(body: SplitRequest, session: SessionDep) -> SplitResponse:
    """Label which stored ratings are validation/test ratings (admin); pairs it does not store are refused (422)
    or, with `unheld: skip`, left out and counted."""
    rows = body.rows
    n, skipped = fed_store.set_evaluation_split(session=session, users=[r.user_id for r in rows],
                                                items=[r.item_id for r in rows], splits=[r.split for r in rows],
                                                skip_unheld=body.unheld == "skip")
    return SplitResponse(rows=n, skipped=skipped)
