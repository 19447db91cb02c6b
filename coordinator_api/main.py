"""The coordinator service: create_app(settings) wires the database, the run manager, the scheduler and the serving fan-out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api_common.errors import install_error_handlers
from api_common.guard import install_guard
from api_common.logs import redact_access_log
from api_common.observability import Observability
from api_common.openapi import document_guard, operation_id
from coordinator_api.deps import header_checks
from coordinator_api.metrics import CoordinatorMetrics
from coordinator_api.routes import ROUTERS
from coordinator_api.routes.schedules import launcher
from services.config import CoordinatorSettings
from services.coordinator import registry
from services.coordinator.client import party_http_client
from services.coordinator.fanout import ServingFanout
from services.coordinator.runner import RunManager
from services.coordinator.schedules import Scheduler
from services.coordinator.sealing import sealer_for
from services.db.session import make_engine, make_sessionmaker


def create_app(settings: CoordinatorSettings, *, resume: bool = True) -> FastAPI:
    """Build the app; lifespan owns the engine, the run manager, the scheduler and the serving fan-out, and resumes
    unfinished runs."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        app.state.engine = engine
        app.state.sessionmaker = make_sessionmaker(engine)
        # Party credentials are sealed in the database; the key never is (services.coordinator.sealing).
        app.state.sessionmaker.configure(info={"sealer": sealer_for(settings)})
        with app.state.sessionmaker() as session:
            registry.seal_stored(session=session)
        app.state.manager = RunManager(sessions=app.state.sessionmaker, settings=settings,
                                       http=party_http_client(settings), on_round=metrics.round_completed)
        app.state.fanout = ServingFanout(settings=settings, sessions=app.state.sessionmaker)
        if resume:
            app.state.manager.resume_all()
        # After resuming: a firing sees the resumed run as active and is skipped.
        app.state.scheduler = Scheduler(sessions=app.state.sessionmaker, launch=launcher(app.state.manager))
        app.state.scheduler.start()
        try:
            yield
        finally:
            app.state.scheduler.shutdown()  # before the run manager: no firing submits to a stopped one
            await app.state.fanout.aclose()
            app.state.fanout.close()
            app.state.manager.shutdown()
            engine.dispose()

    app = FastAPI(title="fedrec coordinator", version="0.1.0", lifespan=lifespan,
                  description="Orchestrates vertical federated GNN training between parties; merges serving.",
                  generate_unique_id_function=operation_id)
    app.state.settings = settings
    install_error_handlers(app)
    document_guard(app)
    redact_access_log()  # access logs carry hashed user ids, never the ids
    observability = Observability(service="coordinator", metrics_token=settings.metrics_token)
    install_guard(app, settings=settings, checks={**header_checks(settings), **observability.guard_checks()})
    metrics = CoordinatorMetrics(observability.registry)
    # Outermost: every answer is timed and carries the security headers, the guard's refusals too.
    observability.install(app, security_headers=True)
    for router in ROUTERS:
        app.include_router(router)
    return app
