"""Dependencies: settings, sessions, and the three credentials (admin, coordinator, API key)."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from party_api.errors import ApiError
from services.config import PartySettings

admin_scheme = HTTPBearer(scheme_name="AdminToken", auto_error=False, description="admin token")
coordinator_scheme = HTTPBearer(
    scheme_name="CoordinatorToken", auto_error=False, description="coordinator credential"
)
api_key_scheme = APIKeyHeader(name="X-API-Key", scheme_name="ApiKey", auto_error=False)


def get_settings(request: Request) -> PartySettings:
    """The settings the app was built with."""
    settings: PartySettings = request.app.state.settings
    return settings


def get_sessionmaker(request: Request) -> sessionmaker[Session]:
    """The app's session factory (for handlers that open sessions in worker threads)."""
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    return factory


def get_session(
    factory: Annotated[sessionmaker[Session], Depends(get_sessionmaker)],
) -> Iterator[Session]:
    """One session per request, closed afterwards (services own their commits)."""
    with factory() as session:
        yield session


SettingsDep = Annotated[PartySettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SessionFactoryDep = Annotated[sessionmaker[Session], Depends(get_sessionmaker)]


def _check(presented: str | None, accepted: list[str], what: str, header: str) -> None:
    """401 without a credential, 403 with one that matches none of the accepted values."""
    if not presented:
        challenge = {"WWW-Authenticate": "Bearer"} if header == "Authorization" else None
        raise ApiError(401, "unauthorized", f"missing {what} ({header} header)", challenge)
    # Compare against every accepted value so timing reveals neither which nor how much matched.
    matches = [hmac.compare_digest(presented.encode(), a.encode()) for a in accepted if a]
    if not any(matches):
        raise ApiError(403, "forbidden", f"wrong {what}")


def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)],
) -> None:
    """Admin token (`Authorization: Bearer ...`): ingestion and admin routes."""
    token = credentials.credentials if credentials else None
    _check(token, [settings.admin_token or ""], "admin token", "Authorization")


def require_coordinator(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)],
) -> None:
    """Coordinator credential (`Authorization: Bearer ...`): federation routes only."""
    token = credentials.credentials if credentials else None
    _check(token, [settings.coordinator_token or ""], "coordinator credential", "Authorization")


def require_api_key(
    settings: SettingsDep, key: Annotated[str | None, Security(api_key_scheme)]
) -> None:
    """Serving API key (`X-API-Key` header): prediction and recommendation routes."""
    _check(key, settings.api_keys, "API key", "X-API-Key")


AdminDep = Depends(require_admin)
CoordinatorDep = Depends(require_coordinator)
ApiKeyDep = Depends(require_api_key)
