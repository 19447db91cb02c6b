"""Releases (admin): each completed run's serving model, its state and figures; activation and rollback."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import NamePath
from coordinator_api.deps import AdminDep, ManagerDep, SessionDep
from coordinator_api.schemas import ReleaseActivate, ReleaseRead
from services.coordinator import releases
from services.db.coordinator_tables import ReleaseRow

router = APIRouter(prefix="/v1/releases", tags=["releases"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 404, 409, 422, 502))


def _read(row: ReleaseRow) -> ReleaseRead:
    return ReleaseRead.model_validate(row, from_attributes=True)


@router.get("", response_model=list[ReleaseRead])
def list_releases(session: SessionDep) -> list[ReleaseRead]:
    """Every release, newest first."""
    return [_read(r) for r in releases.list_releases(session=session)]


@router.get("/{release_id}", response_model=ReleaseRead)
def get_release(release_id: NamePath, session: SessionDep) -> ReleaseRead:
    """One release."""
    return _read(releases.get(session=session, release_id=release_id))


@router.post("/{release_id}/activate", response_model=ReleaseRead, openapi_extra=body_class("small"))
def activate_release(release_id: NamePath, manager: ManagerDep, body: ReleaseActivate | None = None) -> ReleaseRead:
    """Serve a release at every party of its run: a staged one passes the promotion gate unless `force`,
    a retired one is a rollback, the active one is sent again (409 with the reason when refused, 502 when
    a party did not switch)."""
    return _read(manager.releases().activate(release_id=release_id, force=bool(body and body.force)))
