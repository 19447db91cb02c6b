"""The request id that follows one request, or one training round, across services (`X-Request-ID`).

The APIs bind it per request; the coordinator binds one per round; its party client sends it on.
A context variable, so each request, thread and task sees its own (fan-out threads copy the context).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

REQUEST_ID_HEADER = "X-Request-ID"
request_id_var: ContextVar[str | None] = ContextVar("fedrec_request_id", default=None)


def current_request_id() -> str | None:
    """The id bound in this context, if any."""
    return request_id_var.get()


@contextmanager
def bound_request_id(request_id: str | None = None) -> Iterator[str]:
    """Bind a request id (a fresh one by default) for the duration of a block."""
    value = request_id or uuid.uuid4().hex
    token = request_id_var.set(value)
    try:
        yield value
    finally:
        request_id_var.reset(token)
