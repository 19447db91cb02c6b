"""Liveness and readiness probes (no credentials)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from coordinator_api.schemas import HealthRead
from services.db.session import pending_migration
from services.protocol import PROTOCOL_VERSION

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthRead)
def health() -> HealthRead:
    """The coordinator is up."""
    return HealthRead(status="ok", service="coordinator", protocol_version=PROTOCOL_VERSION)


def _not_ready(request: Request) -> str | None:
    """What keeps the coordinator from taking runs, or None."""
    manager = getattr(request.app.state, "manager", None)
    if manager is None:
        return "run manager not started"
    if manager.stopping.is_set():
        return "run manager shutting down"
    return pending_migration(request.app.state.engine, environment="coordinator")


@router.get("/ready", response_model=HealthRead, responses={503: {"model": HealthRead}})
def readiness(request: Request) -> HealthRead | JSONResponse:
    """The database is reachable and migrated to the current schema, and the run manager is running."""
    problem = _not_ready(request)
    if problem:
        body = HealthRead(status="unavailable", service="coordinator", protocol_version=PROTOCOL_VERSION,
                          detail=problem)
        return JSONResponse(body.model_dump(), status_code=503)
    return HealthRead(status="ready", service="coordinator", protocol_version=PROTOCOL_VERSION)
