"""Dependencies: settings, sessions, the services the lifespan built, the three credentials, bodies.

The small ones are `async def` on purpose: FastAPI runs a plain `def` dependency in the threadpool,
one thread hop each, which is most of the cost of a serving request.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from functools import partial
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import Headers

from api_common.auth import admin_scheme, api_key_scheme, bearer, check_credential
from api_common.errors import ApiError
from party_api.bodies import read_limited_body
from services.config import PartySettings
from services.errors import ProtocolError
from services.party.federation import FederationService
from services.party.serving_cache import ModelCache
from services.protocol import PROTOCOL_VERSION
from services.protocol.social import SocialHost

coordinator_scheme = HTTPBearer(
    scheme_name="CoordinatorToken", auto_error=False, description="coordinator credential"
)


async def get_settings(request: Request) -> PartySettings:
    """The settings the app was built with."""
    settings: PartySettings = request.app.state.settings
    return settings


async def get_sessionmaker(request: Request) -> sessionmaker[Session]:
    """The app's session factory (for handlers that open sessions in worker threads)."""
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    return factory


def get_session(
    factory: Annotated[sessionmaker[Session], Depends(get_sessionmaker)],
) -> Iterator[Session]:
    """One session per request, closed afterwards (services own their commits)."""
    with factory() as session:
        yield session


async def get_federation(request: Request) -> FederationService:
    """The federation service the lifespan built; 503 on an API process (it forwards federation routes)."""
    federation: FederationService | None = request.app.state.federation
    if federation is None:
        raise ApiError(503, "federation_not_here", "this party process has PARTY_PROCESS_ROLE=api: it holds no "
                       "run state (federation routes are forwarded to the federation process)")
    return federation


async def get_model_cache(request: Request) -> ModelCache:
    """The serving-model cache the lifespan built."""
    cache: ModelCache = request.app.state.model_cache
    return cache


async def get_social(request: Request) -> SocialHost:
    """The social service the lifespan built; 404 unless this party holds the social graph."""
    social: SocialHost | None = request.app.state.social
    if social is None:
        raise ApiError(404, "not_found", "this party does not hold a social graph (role != social)")
    return social


async def get_social_or_none(request: Request) -> SocialHost | None:
    """The social service, or None on a ratings party."""
    social: SocialHost | None = request.app.state.social
    return social


SettingsDep = Annotated[PartySettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SessionFactoryDep = Annotated[sessionmaker[Session], Depends(get_sessionmaker)]
FedDep = Annotated[FederationService, Depends(get_federation)]
CacheDep = Annotated[ModelCache, Depends(get_model_cache)]
SocialDep = Annotated[SocialHost, Depends(get_social)]
SocialOrNoneDep = Annotated[SocialHost | None, Depends(get_social_or_none)]


async def read_social_body(request: Request, settings: SettingsDep) -> bytes:
    """A social-product body within the party's size limit (413 past it, 422 when empty)."""
    return await read_limited_body(request, limit=settings.social_max_body_bytes)


SocialBodyDep = Annotated[bytes, Depends(read_social_body)]


def check_admin(settings: PartySettings, headers: Headers) -> None:
    """Admin token (`Authorization: Bearer ...`): ingestion and admin routes."""
    check_credential(bearer(headers), [settings.admin_token], what="admin token", header="Authorization")


def check_coordinator(settings: PartySettings, headers: Headers) -> None:
    """Coordinator credential (`Authorization: Bearer ...`): federation routes only."""
    check_credential(bearer(headers), [settings.coordinator_token], what="coordinator credential",
                     header="Authorization")


def check_admin_or_coordinator(settings: PartySettings, headers: Headers) -> None:
    """Admin token or the coordinator's credential (`Authorization: Bearer ...`): erasure, which the
    coordinator fans out to every party (DELETE /v1/users/{id} at the coordinator)."""
    check_credential(bearer(headers), [settings.admin_token, settings.coordinator_token],
                     what="admin token or coordinator credential", header="Authorization")


def check_api_key(settings: PartySettings, headers: Headers) -> None:
    """Serving API key (`X-API-Key` header): prediction and recommendation routes."""
    check_credential(headers.get("x-api-key"), settings.api_keys, what="API key", header="X-API-Key")


def check_serving_caller(settings: PartySettings, headers: Headers) -> None:
    """An app's X-API-Key, or the coordinator's bearer credential (recommendation fan-out)."""
    token = bearer(headers)
    coordinator = (settings.coordinator_token or "").encode()
    if token and not headers.get("x-api-key") and hmac.compare_digest(token.encode(), coordinator):
        return
    check_api_key(settings, headers)


# The Security(...) parameters only declare the schemes in the OpenAPI document; the check reads the
# headers itself, the same function the request guard (api_common.guard) runs before the body is read.
async def require_admin(request: Request, settings: SettingsDep,
                  _: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)]) -> None:
    """Admin token (`Authorization: Bearer ...`): ingestion and admin routes."""
    check_admin(settings, request.headers)


async def require_coordinator(request: Request, settings: SettingsDep,
                        _: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)]) -> None:
    """Coordinator credential (`Authorization: Bearer ...`): federation routes only."""
    check_coordinator(settings, request.headers)


async def require_admin_or_coordinator(
    request: Request, settings: SettingsDep,
    _admin: Annotated[HTTPAuthorizationCredentials | None, Security(admin_scheme)],
    _coordinator: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)],
) -> None:
    """Admin token or the coordinator's credential (`Authorization: Bearer ...`): erasure."""
    check_admin_or_coordinator(settings, request.headers)


async def require_api_key(request: Request, settings: SettingsDep,
                    _: Annotated[str | None, Security(api_key_scheme)]) -> None:
    """Serving API key (`X-API-Key` header): prediction and recommendation routes."""
    check_api_key(settings, request.headers)


async def require_serving_caller(
    request: Request, settings: SettingsDep, _key: Annotated[str | None, Security(api_key_scheme)],
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(coordinator_scheme)],
) -> None:
    """An app's X-API-Key, or the coordinator's bearer credential (recommendation fan-out)."""
    check_serving_caller(settings, request.headers)


def header_checks(settings: PartySettings) -> dict[Any, Callable[[Headers], None]]:
    """The request guard's table: each credential dependency and its header check, bound to the settings."""
    pairs = [(require_admin, check_admin), (require_coordinator, check_coordinator),
             (require_admin_or_coordinator, check_admin_or_coordinator),
             (require_api_key, check_api_key), (require_serving_caller, check_serving_caller)]
    return {dep: partial(check, settings) for dep, check in pairs}


async def require_protocol(x_fedrec_protocol: Annotated[str | None, Header()] = None) -> None:
    """Refuse callers speaking another protocol version."""
    if x_fedrec_protocol != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {x_fedrec_protocol!r} is not supported (this party speaks "
                            f"{PROTOCOL_VERSION!r}; send the X-Fedrec-Protocol header)",
                            extra={"field": "X-Fedrec-Protocol"})


AdminDep = Depends(require_admin)
AdminOrCoordinatorDep = Depends(require_admin_or_coordinator)
CoordinatorDep = Depends(require_coordinator)
ApiKeyDep = Depends(require_api_key)
ServingCallerDep = Depends(require_serving_caller)
ProtocolDep = Depends(require_protocol)
