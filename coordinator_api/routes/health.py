"""Liveness/readiness."""

from __future__ import annotations

from fastapi import APIRouter

from coordinator_api.schemas import HealthRead
from services.protocol import PROTOCOL_VERSION

router = APIRouter(prefix="/health", tags=["health"])


@router.get("", response_model=HealthRead)
def health() -> HealthRead:
    """The coordinator is up."""
    return HealthRead(status="ok", service="coordinator", protocol_version=PROTOCOL_VERSION)
