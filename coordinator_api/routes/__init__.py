"""Every router of the coordinator API, in one list."""

from __future__ import annotations

from fastapi import APIRouter

from coordinator_api.routes import (
                            dashboard,
                            health,
                            parties,
                            recommendations,
                            releases,
                            runs,
                            schedules,
                            users,
)

ROUTERS: list[APIRouter] = [health.router, parties.router, runs.router, recommendations.router,
                            recommendations.predictions_router, users.router, releases.router,
                            schedules.router,
                            dashboard.router]
