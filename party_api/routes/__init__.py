"""Every router of the party API, in one list: add yours here (one line each)."""

from __future__ import annotations

from fastapi import APIRouter

from party_api.routes import federation, health, ingest, serving, social, summary, users

# Federation routers guard themselves with `dependencies=[CoordinatorDep]`,
# serving routers with `dependencies=[ApiKeyDep]` (see party_api.deps).
ROUTERS: list[APIRouter] = [
    health.router,
    ingest.router,
    users.router,
    summary.router,
    federation.router,
    federation.admin_router,
    serving.router,
    social.router,
]
