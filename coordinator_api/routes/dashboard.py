"""The run dashboard: an index of runs and one page per run (no build step; curves are SVG drawn by each page's script).

The pages hold no data, so they need no credential; their scripts read `GET /v1/runs` and `GET /v1/runs/{id}`
with the admin token the operator gives them (`#token=...` in the URL fragment, which browsers never send,
or a form), and refresh every 2 s while a run trains.
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["dashboard"])

# Scripts are inline in the page (no other script may run); data comes only from this origin.
_HEADERS = {"Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            "Cache-Control": "no-store"}


@cache
def _template(name: str) -> str:
    return (files("coordinator_api") / "static" / name).read_text(encoding="utf-8")


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
async def runs_index() -> HTMLResponse:
    """The index of runs, newest first, each linked to its page."""
    return HTMLResponse(_template("runs.html"), headers=_HEADERS)


@router.get("/dashboard/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_dashboard(run_id: str) -> HTMLResponse:
    """The dashboard page of one run."""
    return HTMLResponse(_template("dashboard.html").replace("__RUN_ID__", html.escape(run_id)), headers=_HEADERS)
