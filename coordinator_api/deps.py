"""Dependencies of the coordinator API: settings, sessions, the run manager, auth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.orm import Session

from api_common.auth import admin_scheme, api_key_scheme, check_credential
from services.config import CoordinatorSettings
from services.coordinator.runner import RunManager


def get_settings(request: Request) -> CoordinatorSettings:
    """The app's settings."""
    return request.app.state.settings  # type: ignore[no-any-return]


def get_session(request: Request) -> Iterator[Session]:
    """One session per request."""
    with request.app.state.sessionmaker() as session:
        yield session


def get_manager(request: Request) -> RunManager:
    """The background run manager (built and shut down by the app's lifespan)."""
    return request.app.state.manager  # type: ignore[no-any-return]


SettingsDep = Annotated[CoordinatorSettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ManagerDep = Annotated[RunManager, Depends(get_manager)]


def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)],
) -> None:
    """Admin token (`Authorization: Bearer ...`): registry and run routes."""
    token = credentials.credentials if credentials else None
    check_credential(token, [settings.admin_token], what="admin token", header="Authorization")


def require_api_key(settings: SettingsDep, key: Annotated[str | None, Security(api_key_scheme)]) -> None:
    """Serving API key (`X-API-Key` header): recommendation routes."""
    check_credential(key, settings.api_keys, what="API key", header="X-API-Key")


AdminDep = Depends(require_admin)
ApiKeyDep = Depends(require_api_key)
