"""The party service: create_app(settings) builds a FastAPI app around one party database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from prometheus_client import Gauge
from sqlalchemy.orm import Session, sessionmaker

from api_common.errors import ApiError, install_error_handlers
from api_common.guard import install_guard
from api_common.logs import redact_access_log
from api_common.observability import Observability
from api_common.openapi import document_guard, operation_id
from party_api.deps import header_checks
from party_api.forward import METHODS, FederationForwarder, forwarding_routers
from party_api.routes import FEDERATION_ROUTERS, ROUTERS, federation, health, social, users
from services.config import PartySettings
from services.db.session import make_engine, make_sessionmaker
from services.federation import registry
from services.federation.cluster import Cluster
from services.party.dp_policy import DpPolicy
from services.party.federation import FederationService
from services.party.serving import Snapshot
from services.party.serving_cache import ModelCache
from services.protocol.social import SocialHost


def social_service(settings: PartySettings, sessions: sessionmaker[Session]) -> SocialHost | None:
    """The social-product service of a party holding the social graph (None for a ratings party)."""
    if settings.role != "social":
        return None
    return registry.social_host(sessions=sessions, min_key_bits=settings.paillier_min_key_bits,
                                epsilon_total=settings.social_epsilon_total, delta_total=settings.social_delta_total,
                                allow_no_dp=settings.social_allow_no_dp)


def train_cluster(settings: PartySettings) -> Cluster:
    """Where this party's distributed training ranks meet (PARTY_TRAIN_*)."""
    return Cluster(workers=settings.train_workers, master_addr=settings.train_master_addr,
                   master_port=settings.train_master_port, local_workers=settings.train_local_workers,
                   timeout_s=settings.train_timeout_s, idle_s=settings.train_idle_s)


class NoServing(ModelCache):
    """The federation process serves no model: publish and erasure change the database, API processes rebuild."""

    def refresh(self, *, only_if_missing: bool = False) -> Snapshot | None:
        """Nothing to rebuild here (a snapshot of every rating would only cost this process memory)."""
        return None

    def start(self) -> None:
        """No poller."""


def routers(settings: PartySettings, forwarder: FederationForwarder) -> list[APIRouter]:
    """The routers a process of the settings' role mounts (forwarding ones first: the first match wins)."""
    if settings.process_role == "federation":
        return [health.router, federation.router, social.router, users.router, not_served_here(settings)]
    if settings.process_role == "api":
        return [*forwarding_routers(forwarder), *[r for r in ROUTERS if r not in FEDERATION_ROUTERS]]
    return ROUTERS


def not_served_here(settings: PartySettings) -> APIRouter:
    """On the federation process, any other /v1 route answers 404 saying where it is served."""
    router = APIRouter(include_in_schema=False)

    @router.api_route("/v1/{path:path}", methods=METHODS)
    async def elsewhere() -> None:
        raise ApiError(404, "not_found", f"this is party {settings.party_id}'s federation process "
                       "(PARTY_PROCESS_ROLE=federation): it serves /v1/federation, /v1/social and user erasure; "
                       "ingest, serving, users and summaries are served by its API processes")
    return router


def create_app(settings: PartySettings) -> FastAPI:
    """Build the app; lifespan owns the engine and the services (migrations run beforehand)."""
    role = settings.process_role
    forwarder = FederationForwarder(url=settings.federation_url if role == "api" else None,
                                    timeout_s=settings.federation_timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        sessions = make_sessionmaker(engine)
        app.state.engine, app.state.sessionmaker = engine, sessions
        # Run state only where federation routes are served: an api process forwards them.
        app.state.federation = None if role == "api" else FederationService(
            sessions=sessions, party_id=settings.party_id, rating_min=settings.rating_min,
            rating_max=settings.rating_max, secret=bytes.fromhex(settings.secret) if settings.secret else None,
            peer_identities=settings.peer_identities, dp_policy=DpPolicy.from_settings(settings),
            dev_mode=settings.dev_mode,
            feedback=settings.feedback, cluster=train_cluster(settings), use_features=settings.use_features)
        cache_class = NoServing if role == "federation" else ModelCache
        app.state.model_cache = cache = cache_class(sessions=sessions, refresh_s=settings.serving_refresh_s,
                                                    on_load=lambda snap: model_version.set(snap.version),
                                                    on_hot=lambda snap: hot_version.set(snap.version))
        cache.start()
        app.state.social = social = None if role == "api" else social_service(settings, sessions)
        try:
            yield
        finally:
            if app.state.federation is not None:
                app.state.federation.close()  # distributed training workers leave
            cache.stop()
            if social is not None:
                social.close_all()  # stops the sessions' Paillier worker processes
            await forwarder.close()
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
    observability = Observability(service="party", metrics_token=settings.metrics_token)
    install_guard(app, settings=settings, checks={**header_checks(settings), **observability.guard_checks()},
                  extra_limits={"social": settings.social_max_body_bytes})
    model_version = Gauge("fedrec_serving_model_version", "Version of the serving model this process serves",
                          registry=observability.registry)
    hot_version = Gauge("fedrec_serving_precomputed_version",
                        "Version of the serving model whose per-user top-K lists this process has precomputed",
                        registry=observability.registry)
    # Outermost: every answer is timed and carries the security headers, the guard's refusals too.
    observability.install(app, security_headers=True)
    for router in routers(settings, forwarder):
        app.include_router(router)
    return app
