"""Dependencies: settings, sessions, and the three credentials (admin, coordinator, API key)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from api_common.auth import admin_scheme, api_key_scheme, check_credential
from services.config import PartySettings

coordinator_scheme = HTTPBearer(
    scheme_name="CoordinatorToken", auto_error=False, description="coordinator credential"
)


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


def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)],
) -> None:
    """Admin token (`Authorization: Bearer ...`): ingestion and admin routes."""
    token = credentials.credentials if credentials else None
    check_credential(token, [settings.admin_token], what="admin token", header="Authorization")


def require_coordinator(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)],
) -> None:
    """Coordinator credential (`Authorization: Bearer ...`): federation routes only."""
    token = credentials.credentials if credentials else None
    check_credential(token, [settings.coordinator_token], what="coordinator credential",
                     header="Authorization")


def require_api_key(
    settings: SettingsDep, key: Annotated[str | None, Security(api_key_scheme)]
) -> None:
    """Serving API key (`X-API-Key` header): prediction and recommendation routes."""
    check_credential(key, settings.api_keys, what="API key", header="X-API-Key")


AdminDep = Depends(require_admin)
CoordinatorDep = Depends(require_coordinator)
ApiKeyDep = Depends(require_api_key)
