"""Dependencies of the coordinator API: settings, sessions, auth."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from coordinator_api.errors import ApiError
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
    """The background run manager."""
    return request.app.state.manager  # type: ignore[no-any-return]


SettingsDep = Annotated[CoordinatorSettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ManagerDep = Annotated[RunManager, Depends(get_manager)]


def require_admin(settings: SettingsDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """Bearer admin token (constant-time compare)."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    if not token or not hmac.compare_digest(token, settings.admin_token or ""):
        raise ApiError(401, "unauthorized", "admin bearer token required (Authorization: Bearer ...)")


def require_api_key(settings: SettingsDep, x_api_key: Annotated[str | None, Header()] = None) -> None:
    """X-API-Key from the configured list."""
    if not x_api_key or not any(hmac.compare_digest(x_api_key, k) for k in settings.api_keys):
        raise ApiError(401, "unauthorized", "valid X-API-Key header required")
