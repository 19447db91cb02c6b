"""The party service: create_app(settings) builds a FastAPI app around one party database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api_common.errors import install_error_handlers
from api_common.openapi import operation_id
from party_api.routes import ROUTERS
from services.config import PartySettings
from services.db.session import make_engine, make_sessionmaker


def create_app(settings: PartySettings) -> FastAPI:
    """Build the app; the engine lives from lifespan start to end (migrations run beforehand)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        app.state.engine = engine
        app.state.sessionmaker = make_sessionmaker(engine)
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(
        title=f"fedrec party {settings.party_id}",
        version="0.1.0",
        description="A party of the vertical federated recommender: its data, federation, serving.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app
