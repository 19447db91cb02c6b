"""The one error dialect of both APIs: `{code, detail, field?, errors?, ...}` bodies from one set of handlers.

Domain errors answer with their `http_status` and `{code, detail, **extra}`; refusals of the API
layer itself (credentials, media type, body size) are `ApiError`s; request validation answers 422
naming the row (1-based, for list bodies) and field of each problem; unknown routes answer 404/405
in the same shape. Clients read every one of them back with `services.errors.raise_for`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.errors import DomainError

MAX_ROW_ERRORS = 20


class ApiError(Exception):
    """An HTTP-level refusal (credentials, media type, body size) raised by the API layer itself."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers


class RowErrorRead(BaseModel):
    """One rejected row: 1-based data row (0 = header, null = not in a list), field and reason."""

    row: int | None
    field: str | None
    reason: str


class ErrorRead(BaseModel):
    """Body of every error response; domain errors may add fields (run_id, party_id, budget figures)."""

    model_config = ConfigDict(extra="allow")
    code: str
    detail: str
    field: str | None = None
    errors: list[RowErrorRead] | None = None


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entry declaring the error body for the given status codes."""
    return {status: {"model": ErrorRead} for status in statuses}


async def _domain(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    return JSONResponse({"code": exc.code, "detail": exc.detail, **exc.extra}, exc.http_status)


async def _api(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse({"code": exc.code, "detail": exc.detail}, exc.status, headers=exc.headers)


def _row_error(err: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's loc ('body', 'rows', 3, 'rating') becomes row 4, field 'rating'."""
    loc = [p for p in err.get("loc", ()) if p != "body"]
    index = next((p for p in loc if isinstance(p, int)), None)
    names = [str(p) for p in loc if isinstance(p, str)]
    field = names[-1] if names else None
    return {"row": None if index is None else index + 1, "field": field, "reason": err["msg"]}


async def _request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [_row_error(e) for e in exc.errors()][:MAX_ROW_ERRORS]
    first = errors[0] if errors else {"field": None, "reason": "invalid request"}
    where = f"row {first['row']}: " if first.get("row") else ""
    detail = (
        f"request rejected, nothing stored: {where}{first.get('field') or ''} {first['reason']}"
    )
    body = {"code": "validation_failed", "detail": detail, "field": first.get("field"), "errors": errors}
    return JSONResponse(body, 422)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 408: "request_timeout",
            413: "payload_too_large"}.get(exc.status_code, "http_error")
    return JSONResponse(
        {"code": code, "detail": str(exc.detail)}, exc.status_code, headers=exc.headers
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on an app."""
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(ApiError, _api)
    app.add_exception_handler(RequestValidationError, _request)
    app.add_exception_handler(StarletteHTTPException, _http)
