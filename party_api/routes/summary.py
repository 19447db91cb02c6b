"""Counts and data summary (admin)."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from party_api.deps import AdminDep, SessionDep, SettingsDep
from party_api.schemas import CountsRead, SummaryRead
from services.party import catalog

router = APIRouter(prefix="/v1", tags=["summary"], dependencies=[AdminDep])
ERRORS = error_responses(401, 403)


@router.get("/counts", response_model=CountsRead, responses=ERRORS)
def get_counts(session: SessionDep) -> catalog.Counts:
    """Numbers of users, items, interactions and social links."""
    return catalog.counts(session=session)


@router.get("/summary", response_model=SummaryRead, responses=ERRORS)
def get_summary(session: SessionDep, settings: SettingsDep) -> catalog.Summary:
    """Counts, rating histogram and rating scale."""
    return catalog.summary(
        session=session,
        party_id=settings.party_id,
        role=settings.role,
        rating_min=settings.rating_min,
        rating_max=settings.rating_max,
    )
