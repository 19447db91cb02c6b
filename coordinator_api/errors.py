"""Map domain errors to `{code, detail}` JSON bodies (one handler for the whole app)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.errors import (
    DomainError,
)


class ApiError(Exception):
    """A refusal of the API layer itself (credentials)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def install(app: FastAPI) -> None:
    """Register the domain-error handler."""

    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DomainError)
        return JSONResponse({"code": exc.code, "detail": exc.detail, **exc.extra}, status_code=exc.http_status)

    async def api(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"code": exc.code, "detail": exc.detail}, status_code=exc.status, headers=headers)

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors: list[dict[str, Any]] = [
            {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"), "reason": e.get("msg", "")}
            for e in exc.errors()][:20]
        first = errors[0] if errors else {"field": "", "reason": "invalid request"}
        return JSONResponse({"code": "validation_failed", "detail": f"{first['field']}: {first['reason']}",
                             "field": first["field"], "errors": errors}, status_code=422)

    app.add_exception_handler(DomainError, handle)
    app.add_exception_handler(ApiError, api)
    app.add_exception_handler(RequestValidationError, invalid)


ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    404: {"description": "Not found"}, 409: {"description": "Conflict"},
    422: {"description": "Validation failed"}, 502: {"description": "Party unavailable"},
}
