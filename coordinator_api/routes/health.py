"""Liveness/readiness."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from services.protocol import PROTOCOL_VERSION

router = APIRouter(prefix="/health", tags=["health"])


class HealthRead(BaseModel):
    """Service status."""

    status: str
    service: str
    protocol_version: str


@router.get("", response_model=HealthRead)
def health() -> HealthRead:
    """The coordinator is up."""
    return HealthRead(status="ok", service="coordinator", protocol_version=PROTOCOL_VERSION)
