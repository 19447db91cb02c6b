"""Every router of the party API, in one list: add yours here (one line each)."""

from __future__ import annotations

from fastapi import APIRouter

from party_api.routes import features, federation, health, ingest, serving, social, summary, users

# Federation routers guard themselves with `dependencies=[CoordinatorDep]`,
# serving routers with `dependencies=[ApiKeyDep]` (see party_api.deps).
# Serving second: the router tries routes in this order, and top-K and predictions are the hot path.
ROUTERS: list[APIRouter] = [
    health.router,
    serving.router,
    ingest.router,
    features.router,
    users.router,
    summary.router,
    federation.router,
    federation.admin_router,
    social.router,
]

# Served only where the party's run state is (the federation process, or a process of role all);
# an API process forwards them (party_api.forward). Erasure in users.router is forwarded too.
FEDERATION_ROUTERS: list[APIRouter] = [federation.router, social.router]
