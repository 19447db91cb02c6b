"""Party registry (admin): changes apply to running runs from their next call, no restart."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import Field

from api_common.errors import error_responses
from api_common.params import NamePath
from api_common.guard import body_class
from coordinator_api.deps import AdminDep, ManagerDep, SessionDep, SettingsDep
from coordinator_api.schemas import PartyCheckRead, PartyCreate, PartyRead, PartyUpdate
from services.coordinator import registry
from services.protocol.ids import NAME_PATTERN

router = APIRouter(prefix="/v1/parties", tags=["parties"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 404, 409, 422))


def _read(p: registry.PartyEndpoint) -> PartyRead:
    return PartyRead(party_id=p.party_id, url=registry.without_userinfo(p.url), role=p.role, enabled=p.enabled,
                     tls_name=p.tls_name)


def _hosts(hosts: list[str]) -> frozenset[str]:
    return frozenset(h.lower().rstrip(".") for h in hosts)


@router.get("", response_model=list[PartyRead])
def list_parties(session: SessionDep) -> list[PartyRead]:
    """All registered parties."""
    return [_read(p) for p in registry.list_parties(session=session)]


@router.post("", response_model=PartyRead, status_code=201, openapi_extra=body_class("small"))
def register_party(body: PartyCreate, session: SessionDep, settings: SettingsDep) -> PartyRead:
    """Register a party (https:// only when the coordinator is configured for TLS, outside dev mode)."""
    return _read(registry.register(session=session, https_only=settings.https_parties_only,
                                   allowed_hosts=_hosts(settings.party_hosts), **body.model_dump()))


@router.post("/check", response_model=list[PartyCheckRead])
def check_parties(session: SessionDep, manager: ManagerDep,
                  party_ids: Annotated[list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None,
                                       Query(max_length=1000)] = None) -> list[PartyCheckRead]:
    """Pre-flight of the registered parties (or the named ones): reachable, credential, protocol version, data."""
    ids = party_ids or [p.party_id for p in registry.list_parties(session=session)]
    reasons = manager.check(party_ids=ids)
    return [PartyCheckRead(party_id=p, ok=not why, reason=why) for p, why in sorted(reasons.items())]


@router.get("/{party_id}", response_model=PartyRead)
def get_party(party_id: NamePath, session: SessionDep) -> PartyRead:
    """One party."""
    return _read(registry.get(session=session, party_id=party_id))


@router.patch("/{party_id}", response_model=PartyRead, openapi_extra=body_class("small"))
def update_party(party_id: NamePath, body: PartyUpdate, session: SessionDep, settings: SettingsDep) -> PartyRead:
    """Change a party's URL, credential, role, enabled flag or TLS name."""
    return _read(registry.update(session=session, party_id=party_id, https_only=settings.https_parties_only,
                                 allowed_hosts=_hosts(settings.party_hosts), **body.model_dump(exclude_unset=True)))


@router.delete("/{party_id}", status_code=204)
def remove_party(party_id: NamePath, session: SessionDep) -> Response:
    """Remove a party from the registry."""
    registry.remove(session=session, party_id=party_id)
    return Response(status_code=204)
