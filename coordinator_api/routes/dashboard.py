"""The run dashboard: one HTML page per run (no build step; the curve is SVG drawn by the page's own script).

The page holds no data, so it needs no credential; its script reads the run from `GET /v1/runs/{id}`
with the admin token the operator gives it (`#token=...` in the URL fragment, which browsers never
send, or a form), and refreshes every 2 s while the run trains.
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["dashboard"])


@cache
def _template() -> str:
    return (files("coordinator_api") / "static" / "dashboard.html").read_text(encoding="utf-8")


@router.get("/dashboard/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_dashboard(run_id: str) -> HTMLResponse:
    """The dashboard page of one run."""
    return HTMLResponse(_template().replace("__RUN_ID__", html.escape(run_id)),
                        headers={"Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; "
                                 "style-src 'unsafe-inline'", "Cache-Control": "no-store"})
