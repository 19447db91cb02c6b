"""The party service: create_app(settings) builds a FastAPI app around one party database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import Gauge
from sqlalchemy.orm import Session, sessionmaker

from api_common.errors import install_error_handlers
from api_common.guard import install_guard
from api_common.logs import redact_access_log
from api_common.observability import Observability
from api_common.openapi import document_guard, operation_id
from party_api.deps import header_checks
from party_api.routes import ROUTERS
from services.config import PartySettings
from services.db.session import make_engine, make_sessionmaker
from services.p4gcn.ledger import SocialBudget
from services.p4gcn.service import SocialService
from services.party.federation import FederationService
from services.party.serving_cache import ModelCache


def social_service(settings: PartySettings, sessions: sessionmaker[Session]) -> SocialService | None:
    """The social-product service of a party holding the social graph (None for a ratings party)."""
    if settings.role != "social":
        return None
    budget = SocialBudget(epsilon_total=settings.social_epsilon_total, delta_total=settings.social_delta_total,
                          allow_no_dp=settings.social_allow_no_dp)
    return SocialService(sessions=sessions, min_key_bits=settings.paillier_min_key_bits, budget=budget)


def create_app(settings: PartySettings) -> FastAPI:
    """Build the app; lifespan owns the engine and the services (migrations run beforehand)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        sessions = make_sessionmaker(engine)
        app.state.engine, app.state.sessionmaker = engine, sessions
        app.state.federation = FederationService(
            sessions=sessions, party_id=settings.party_id, rating_min=settings.rating_min,
            rating_max=settings.rating_max, secret=bytes.fromhex(settings.secret) if settings.secret else None,
            peer_identities=settings.peer_identities)
        app.state.model_cache = cache = ModelCache(sessions=sessions, refresh_s=settings.serving_refresh_s,
                                                   on_load=lambda snap: model_version.set(snap.version))
        cache.start()
        app.state.social = social = social_service(settings, sessions)
        try:
            yield
        finally:
            cache.stop()
            if social is not None:
                social.close_all()  # stops the sessions' Paillier worker processes
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
    document_guard(app)
    redact_access_log()  # access logs carry hashed user ids, never the ids
    install_guard(app, settings=settings, checks=header_checks(settings),
                  extra_limits={"social": settings.social_max_body_bytes})
    observability = Observability(service="party", metrics_token=settings.metrics_token)
    model_version = Gauge("fedrec_serving_model_version", "Version of the serving model this process serves",
                          registry=observability.registry)
    observability.install(app)  # outermost: every answer is timed, the guard's refusals too
    for router in ROUTERS:
        app.include_router(router)
    return app
