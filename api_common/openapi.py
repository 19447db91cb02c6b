"""Stable OpenAPI operation ids, so generated clients keep their method names."""

from __future__ import annotations

from fastapi.routing import APIRoute


def operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids: "{tag}-{route name}"."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name
