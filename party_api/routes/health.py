"""Liveness and readiness probes (no credentials)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from party_api.deps import SettingsDep
from party_api.schemas import HealthRead
from services.db.session import pending_migration

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthRead)
async def liveness(request: Request) -> Response:
    """The process is up."""
    # async and no dependency: a probe costs no thread hop and no dependency resolution; the body is the
    # same for every probe of this app, so it is serialized once (no per-probe model validation)
    state = request.app.state
    body: bytes | None = getattr(state, "health_body", None)
    if body is None:
        body = state.health_body = HealthRead(status="ok", party_id=state.settings.party_id).model_dump_json().encode()
    return Response(body, media_type="application/json")


@router.get("/ready", response_model=HealthRead, responses={503: {"model": HealthRead}})
def readiness(request: Request, settings: SettingsDep) -> HealthRead | JSONResponse:
    """The database is reachable and migrated to the current schema."""
    problem = pending_migration(request.app.state.engine)
    if problem:
        body = HealthRead(status="unavailable", party_id=settings.party_id, detail=problem)
        return JSONResponse(body.model_dump(), status_code=503)
    return HealthRead(status="ready", party_id=settings.party_id)
