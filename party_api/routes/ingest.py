"""Ingestion of interactions, social links and items: JSON batches and streamed bulk uploads."""

from __future__ import annotations

from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Header, Request

from api_common.errors import ApiError, error_responses
from api_common.guard import body_class
from party_api.bodies import consume_in_thread
from party_api.deps import AdminDep, SessionDep, SessionFactoryDep, SettingsDep
from party_api.schemas import (
    IngestRead,
    InteractionBatchCreate,
    ItemBatchCreate,
    ItemsRead,
    SocialLinkBatchCreate,
)
from services.party import catalog, ingest
from services.party.ingest import IngestReport, Kind

router = APIRouter(prefix="/v1", tags=["ingest"], dependencies=[AdminDep])
ERRORS = error_responses(401, 403, 422)
MEDIA_TYPES = {"text/csv": "csv", "application/x-ndjson": "ndjson", "application/jsonl": "ndjson"}
# The spec declares the CSV body only: generated clients get one clean streamed-file parameter
# (docs/openapi-client.yaml maps text/csv to a binary body); NDJSON is accepted all the same.
BULK_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "CSV with a header row (streamed). The route also takes NDJSON, one JSON object per line, "
                       "sent as application/x-ndjson or application/jsonl.",
        "content": {"text/csv": {"schema": {"type": "string", "format": "binary"}}},
    },
    **body_class("bulk"),
}


def _format(content_type: str | None) -> ingest.Format:
    media = (content_type or "").split(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        allowed = ", ".join(MEDIA_TYPES)
        raise ApiError(
            415, "unsupported_media_type", f"Content-Type {media!r}; use one of {allowed}"
        )
    return MEDIA_TYPES[media]  # type: ignore[return-value]


async def _bulk(
    request: Request,
    factory: SessionFactoryDep,
    settings: SettingsDep,
    kind: Kind,
    content_type: str | None,
) -> IngestReport:
    fmt = _format(content_type)

    def work(body: BinaryIO) -> IngestReport:
        with factory() as session:
            return ingest.ingest_stream(
                session=session,
                body=body,
                kind=kind,
                fmt=fmt,
                rating_min=settings.rating_min,
                rating_max=settings.rating_max,
                batch_rows=settings.ingest_batch_rows,
                feedback=settings.feedback,
            )

    return await consume_in_thread(request, work)


@router.post("/interactions", response_model=IngestRead, responses=ERRORS)
def add_interactions(
    body: InteractionBatchCreate, session: SessionDep, settings: SettingsDep
) -> IngestReport:
    """Store a JSON batch of ratings (an implicit party: interactions) atomically; a repeated pair updates it."""
    return ingest.ingest_records(
        session=session,
        records=[r.model_dump(exclude_none=True) for r in body.rows],  # an absent value is "not sent"
        kind="interactions",
        rating_min=settings.rating_min,
        rating_max=settings.rating_max,
        feedback=settings.feedback,
    )


@router.post(
    "/interactions/bulk",
    response_model=IngestRead,
    openapi_extra=BULK_BODY,
    responses=error_responses(401, 403, 415, 422),
)
async def bulk_interactions(
    request: Request,
    factory: SessionFactoryDep,
    settings: SettingsDep,
    content_type: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> IngestReport:
    """Stream a CSV/NDJSON upload of ratings (user_id,item_id,rating[,timestamp]); all or nothing.

    At an implicit party (PARTY_FEEDBACK=implicit) rows are interactions: user_id,item_id[,weight][,timestamp].
    """
    return await _bulk(request, factory, settings, "interactions", content_type)


@router.post("/social-links", response_model=IngestRead, responses=ERRORS)
def add_social_links(
    body: SocialLinkBatchCreate, session: SessionDep, settings: SettingsDep
) -> IngestReport:
    """Store a JSON batch of social links atomically."""
    return ingest.ingest_records(
        session=session,
        records=[r.model_dump() for r in body.rows],
        kind="social_links",
        rating_min=settings.rating_min,
        rating_max=settings.rating_max,
    )


@router.post(
    "/social-links/bulk",
    response_model=IngestRead,
    openapi_extra=BULK_BODY,
    responses=error_responses(401, 403, 415, 422),
)
async def bulk_social_links(
    request: Request,
    factory: SessionFactoryDep,
    settings: SettingsDep,
    content_type: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> IngestReport:
    """Stream a CSV/NDJSON upload of links (src_user_id,dst_user_id[,weight]); all or nothing."""
    return await _bulk(request, factory, settings, "social_links", content_type)


@router.post("/items", response_model=ItemsRead, responses=ERRORS)
def upsert_items(body: ItemBatchCreate, session: SessionDep) -> ItemsRead:
    """Create or update catalogue items with their metadata."""
    rows = [{"external_id": str(i.external_id), "metadata": i.metadata} for i in body.rows]
    return ItemsRead(rows=catalog.upsert_items(session=session, items=rows))
