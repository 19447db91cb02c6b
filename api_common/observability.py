"""Metrics, request ids and JSON logs for both APIs.

`Observability` owns one prometheus registry per app (several apps live in one test process), the
HTTP metrics every route shares (latency histogram per route, method and status; requests in
flight) and a pure ASGI middleware that times each request, binds its request id (the caller's
`X-Request-ID`, or a fresh one) for the logs and for calls the service makes onward, echoes it in
the answer and logs one JSON line. `/metrics` answers with its own token (`*_METRICS_TOKEN`),
never an API credential, so a scraper holds no power over data.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import ssl
import sys
import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _esc  # json.dumps' own string escaping (ensure_ascii)
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api_common.errors import ApiError
from api_common.headers import with_security_headers
from api_common.http_protocol import deadline_protocol
from api_common.logs import RedactUserIds
from services.config import GuardSettings
from services.protocol.tracing import REQUEST_ID_HEADER, current_request_id, request_id_var

log = logging.getLogger("fedrec.http")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, process id, the bound request id, any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
                                "level": record.levelname.lower(), "logger": record.name,
                                "message": record.getMessage(),
                                "pid": record.process}  # which worker, when several serve one port
        request_id = current_request_id()
        if request_id:
            body["request_id"] = request_id
        body.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")})
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure_json_logging(level: str = "INFO") -> None:
    """Route every logger (ours and uvicorn's) to stdout as JSON lines (process entry points call this)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def uvicorn_options(*, log_format: str, cert: Path | None, key: Path | None, guard: GuardSettings,
                    client_ca: Path | None = None) -> dict[str, Any]:
    """uvicorn.run keywords for a service's logs, TLS (client certificates required when a client CA is set),
    forwarded headers (believed from `guard.trusted_proxies` only) and slow-client limits."""
    # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: any local process could then
    # rotate the address the auth throttle counts. Only listed proxies are believed.
    options: dict[str, Any] = {"proxy_headers": bool(guard.trusted_proxies),
                               "forwarded_allow_ips": ",".join(guard.trusted_proxies) or None,
                               "http": deadline_protocol(header_timeout_s=guard.header_timeout_s,
                                                         max_header_bytes=guard.max_header_bytes,
                                                         max_per_address=guard.max_connections_per_address,
                                                         exempt=guard.trusted_proxies,
                                                         max_connections=guard.max_connections,
                                                         reserved=guard.reserved_connections,
                                                         credentials=guard.reserved_credentials(),
                                                         reserved_header_timeout_s=guard.reserved_header_timeout_s),
                               "limit_concurrency": guard.max_connections}
    if log_format == "json":
        configure_json_logging()
        # Our logging config stays; the middleware writes one JSON line per request instead of the access log.
        options.update(log_config=None, access_log=False)
    if cert is not None and key is not None:
        options.update(ssl_certfile=str(cert), ssl_keyfile=str(key))
        if client_ca is not None:
            options.update(ssl_ca_certs=str(client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


class Observability:
    """An app's metric registry and HTTP metrics; services add their own metrics to `registry`."""

    def __init__(self, *, service: str, metrics_token: str | None) -> None:
        self.service = service
        self.metrics_token = metrics_token
        self.redactor = RedactUserIds()  # request lines carry hashed user ids, never the ids
        self.registry = CollectorRegistry()
        self.latency = Histogram("fedrec_http_request_duration_seconds", "HTTP request latency",
                                 ["route", "method", "status"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("fedrec_http_requests_in_flight", "HTTP requests being served",
                               registry=self.registry)

    def install(self, app: FastAPI, *, security_headers: bool = False) -> None:
        """Add the middleware and the /metrics route to an app; with `security_headers`, the middleware also
        adds api_common.headers' security headers to every answer (instead of a middleware of their own)."""
        app.add_middleware(_ObservedRequests, observability=self,
                           response_headers=with_security_headers if security_headers else None)

        async def metrics() -> Response:
            """Prometheus metrics of this process (Authorization: Bearer <metrics token>)."""
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False,
                          dependencies=[Depends(self.require_metrics)])

    def require_metrics(self, request: Request) -> None:
        """Dependency of /metrics; the request guard runs the same check first (and throttles its failures)."""
        self.check_token(request.headers.get("authorization"))

    def guard_checks(self) -> dict[Any, Callable[[Headers], None]]:
        """The request guard's entry for /metrics: its dependency and the header check."""
        return {self.require_metrics: lambda headers: self.check_token(headers.get("authorization"))}

    def check_token(self, authorization: str | None) -> None:
        """404 when no metrics token is set (metrics off), 401/403 without the right one."""
        if not self.metrics_token:
            raise ApiError(404, "not_found", "metrics are off: set a metrics token to enable /metrics")
        presented = (authorization or "").removeprefix("Bearer ").strip()
        if not presented:
            raise ApiError(401, "unauthorized", "missing metrics token (Authorization header)",
                           {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(presented.encode(), self.metrics_token.encode()):
            raise ApiError(403, "forbidden", "wrong metrics token")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _raw_path(scope: Scope) -> str:
    """The path as it arrived (percent-encoded), so a user id stays one segment for the redactor."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))


def _valid_id(value: str | None) -> str | None:
    """A caller's request id is kept when short and printable (it ends up in logs and onward headers)."""
    if value and len(value) <= 128 and value.isascii() and value.isprintable():
        return value
    return None


def _fast_json_stream(logger: logging.Logger) -> Any:
    """The stream a request line can be written to directly, or None when logging must format it.

    Direct only in the configuration `configure_json_logging` makes (the root's one StreamHandler with
    JsonFormatter, no filters on the way): the line is then the one the formatter would write.
    """
    if logger.handlers or logger.filters or not logger.propagate or logger.disabled:
        return None
    root = logging.getLogger()
    if root.filters or len(root.handlers) != 1:
        return None
    handler = root.handlers[0]
    if (type(handler) is not logging.StreamHandler or type(handler.formatter) is not JsonFormatter
            or handler.filters or handler.level > logging.INFO):
        return None
    return handler


class _ObservedRequests:
    """Pure ASGI middleware: request id, latency histogram, in-flight gauge, one JSON log line per request,
    and the response headers every answer carries (`response_headers`: the security headers)."""

    def __init__(self, app: ASGIApp, *, observability: Observability,
                 response_headers: Callable[[list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]] | None = None,
                 ) -> None:
        self.app, self.obs = app, observability
        self._id_header = REQUEST_ID_HEADER.lower().encode()
        self._response_headers = response_headers
        self._latency: dict[tuple[str, str, int], Any] = {}  # histogram children, resolved once per label set
        self._pid = os.getpid()
        self._second, self._stamp = -1, ""
        self._logger, self._service = _esc(log.name), _esc(observability.service)
        self._flush_pending = False

    def _child(self, path: str, method: str, status: int) -> Any:
        key = (path, method, status)
        child = self._latency.get(key)
        if child is None:
            child = self._latency[key] = self.obs.latency.labels(path, method, str(status))
        return child

    def _ts(self, now: float) -> str:
        """JsonFormatter's timestamp (local time to the second, then milliseconds), the second formatted once."""
        second = int(now)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(second))
        return f"{self._stamp}.{int((now - second) * 1000):03d}Z"

    def _log(self, fields: dict[str, Any]) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        handler = _fast_json_stream(log)
        if handler is None:
            log.info("request", extra=fields)
            return
        line = self._line(fields) + handler.terminator
        with handler.lock:  # type: ignore[union-attr]
            handler.stream.write(line)
        self._flush_soon(handler)

    def _line(self, fields: dict[str, Any]) -> str:
        """The line JsonFormatter writes for `log.info("request", extra=fields)`, keys in its order, formatted
        without building a dict (every string JSON-escaped as json.dumps escapes it)."""
        return (f'{{"ts": "{self._ts(time.time())}", "level": "info", "logger": {self._logger}, '
                f'"message": "request", "pid": {self._pid}, "request_id": {_esc(fields["request_id"])}, '
                f'"method": {_esc(fields["method"])}, "route": {_esc(fields["route"])}, '
                f'"status": {int(fields["status"])}, "path": {_esc(fields["path"])}, '
                f'"duration_ms": {float(fields["duration_ms"])!r}, "service": {self._service}}}')

    def _flush_soon(self, handler: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        """Flush the stream once the event loop has run what is ready now: the lines of every request that
        finished meanwhile go out in one write, instead of one write (system call) per request."""
        if self._flush_pending:
            return
        self._flush_pending = True
        asyncio.get_running_loop().call_soon(self._flush, handler)

    def _flush(self, handler: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        self._flush_pending = False
        handler.flush()  # under the handler's lock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _valid_id(_header(scope, self._id_header)) or os.urandom(16).hex()  # uuid4().hex's form
        token = request_id_var.set(request_id)
        status = 500
        started = time.perf_counter()
        extra = self._response_headers

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (self._id_header, request_id.encode())]
                message["headers"] = extra(headers) if extra is not None else headers
            await send(message)

        in_flight = self.obs.in_flight
        in_flight.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            in_flight.dec()
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"  # the template: bounded label values
            self._child(path, scope["method"], status).observe(elapsed)
            self._log({"method": scope["method"], "route": path, "status": status,
                       "path": self.obs.redactor.redact(_raw_path(scope)),
                       "duration_ms": round(elapsed * 1e3, 3), "request_id": request_id,
                       "service": self.obs.service})
            request_id_var.reset(token)
