"""Dependencies of the coordinator API: settings, sessions, the run manager, the serving fan-out, auth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.orm import Session
from starlette.datastructures import Headers

from api_common.auth import admin_scheme, api_key_scheme, bearer, check_credential
from services.config import CoordinatorSettings
from services.coordinator.fanout import ServingFanout
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


async def get_fanout(request: Request) -> ServingFanout:
    """The serving fan-out (its own clients and pool; built and closed by the app's lifespan); async: no thread hop."""
    return request.app.state.fanout  # type: ignore[no-any-return]


SettingsDep = Annotated[CoordinatorSettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ManagerDep = Annotated[RunManager, Depends(get_manager)]
FanoutDep = Annotated[ServingFanout, Depends(get_fanout)]


def check_admin(settings: CoordinatorSettings, headers: Headers) -> None:
    """Admin token (`Authorization: Bearer ...`): registry and run routes."""
    check_credential(bearer(headers), [settings.admin_token], what="admin token", header="Authorization")


def check_api_key(settings: CoordinatorSettings, headers: Headers) -> None:
    """Serving API key (`X-API-Key` header): recommendation routes."""
    check_credential(headers.get("x-api-key"), settings.api_keys, what="API key", header="X-API-Key")


# The Security(...) parameters declare the schemes in the OpenAPI document; the checks read the
# headers, the same functions the request guard (api_common.guard) runs before the body is read.
def require_admin(request: Request, settings: SettingsDep,
                  _: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)]) -> None:
    """Admin token (`Authorization: Bearer ...`): registry and run routes."""
    check_admin(settings, request.headers)


def require_api_key(request: Request, settings: SettingsDep,
                    _: Annotated[str | None, Security(api_key_scheme)]) -> None:
    """Serving API key (`X-API-Key` header): recommendation routes."""
    check_api_key(settings, request.headers)


def header_checks(settings: CoordinatorSettings) -> dict[Any, Callable[[Headers], None]]:
    """The request guard's table: each credential dependency and its header check, bound to the settings."""
    return {require_admin: partial(check_admin, settings), require_api_key: partial(check_api_key, settings)}


AdminDep = Depends(require_admin)
ApiKeyDep = Depends(require_api_key)
