"""Stable OpenAPI operation ids, so generated clients keep their method names."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from api_common.errors import ErrorRead


def operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids: "{tag}-{route name}"."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def document_guard(app: FastAPI) -> None:
    """Add to every operation the answers of the request guard and validation, which no route declares:
    401/403/429 where a credential is required, 413 everywhere (body limits), 422 where anything is parsed."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorRead"}}}}
        for operations in schema.get("paths", {}).values():
            for op in operations.values():
                responses = op.setdefault("responses", {})
                wanted = {"413": "request body over this route's limit"}
                if op.get("security"):
                    wanted |= {"401": "missing credential", "403": "wrong credential",
                               "429": "too many failed authentications from this address (Retry-After)"}
                if op.get("parameters") or op.get("requestBody"):
                    wanted["422"] = "invalid input, naming the field"
                for status, description in wanted.items():
                    responses.setdefault(status, {"description": description, **error})
        if "ErrorRead" not in schema.get("components", {}).get("schemas", {}):
            schema.setdefault("components", {}).setdefault("schemas", {})["ErrorRead"] = \
                ErrorRead.model_json_schema(ref_template="#/components/schemas/{model}")
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
