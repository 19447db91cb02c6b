"""Every router of the coordinator API, in one list."""

from __future__ import annotations

from fastapi import APIRouter

from coordinator_api.routes import dashboard, health, parties, recommendations, runs

ROUTERS: list[APIRouter] = [health.router, parties.router, runs.router, recommendations.router, dashboard.router]
