"""The request guard of both APIs: credential, throttle and body limit before any body byte is read.

The guard is the app router's dispatcher. It finds the route (once: the router does not search
again), runs the header check of the credential that route's dependencies require (the same
function the dependency would run: a credential its router attaches is then left out of the route
the guard dispatches to, so it is checked once), and refuses an oversized Content-Length; bodies without a
length are counted while the app streams them, against the route's limit, the body deadline and a
minimum rate. Each route's policy is computed once. Nothing here buffers a body, so a 200 MB upload
without a credential costs the service a few kilobytes of socket buffer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from fastapi.routing import APIRoute, iter_route_contexts
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api_common.errors import ApiError

HeaderCheck = Callable[[Headers], None]  # raises ApiError 401/403
BODY_CLASS_KEY = "x-body-class"
NO_BODY = "none"


def body_class(name: str) -> dict[str, Any]:
    """`openapi_extra=` entry naming a route's body-size class (its limit is a setting per class)."""
    return {BODY_CLASS_KEY: name}


class BodyTooLarge(StarletteHTTPException):
    """Raised from `receive` once a streamed body passes its route's limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes for this route")


class BodyTimeout(StarletteHTTPException):
    """Raised from `receive` when the app waits longer than the body timeout for the next body bytes, or the
    body arrives slower than the minimum rate (408)."""

    def __init__(self, seconds: float, detail: str | None = None) -> None:
        super().__init__(408, detail or f"no request body bytes for {seconds:g} s", headers={"Connection": "close"})


class AuthThrottle:
    """Failed authentications per client address in a sliding window; past the limit the address waits."""

    MAX_ADDRESSES = 10_000  # bounded memory under a spray of source addresses

    def __init__(self, *, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, address: str) -> deque[float]:
        now = self.clock()
        failures = self._failures.get(address, deque())
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        return failures

    def retry_after(self, address: str) -> int | None:
        """Seconds the address must wait, or None when it may try."""
        failures = self._recent(address)
        if len(failures) < self.limit:
            return None
        return max(1, int(failures[0] + self.window_s - self.clock()) + 1)

    def failed(self, address: str) -> None:
        """Record one failed authentication."""
        if len(self._failures) >= self.MAX_ADDRESSES and address not in self._failures:
            self._failures = {a: f for a, f in self._failures.items() if self._recent(a)}
            if len(self._failures) >= self.MAX_ADDRESSES:
                self._failures.pop(next(iter(self._failures)))
        failures = self._recent(address)
        failures.append(self.clock())
        self._failures[address] = failures


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class _Policy:
    """What the guard enforces for one route: header checks (all must pass) and a body limit."""

    __slots__ = ("checks", "limit")

    def __init__(self, checks: list[HeaderCheck], limit: int) -> None:
        self.checks, self.limit = checks, limit


def _dependency_calls(route: Any) -> list[Any]:
    dependant = getattr(route, "dependant", None)
    found, stack = [], list(dependant.dependencies if dependant is not None else [])
    while stack:
        dep = stack.pop()
        found.append(dep.call)
        stack.extend(dep.dependencies)
    return found


_ROUTE_PARAMETERS = tuple(name for name in inspect.signature(APIRoute.__init__).parameters
                          if name not in ("self", "path", "endpoint"))


def _route_kwargs(context: Any) -> dict[str, Any] | None:
    """APIRoute's keywords for a route of an included router (prefix, dependencies, responses, …) as FastAPI
    sees it; None for a route of the app itself (kept as it is) or one that is no APIRoute."""
    if not isinstance(context.original_route, APIRoute):
        return None  # mounts and other routes: served by the app's own router
    if context.route is context.original_route and getattr(context, "_route_context", None) is None:
        return None
    return {name: getattr(context, name) for name in _ROUTE_PARAMETERS if hasattr(context, name)}


def _flat_route(context: Any) -> Any:
    """A plain APIRoute with everything an included router gives its route: matched by one regex, as a route
    added to the app directly. A route of the app itself is kept."""
    kwargs = _route_kwargs(context)
    if kwargs is None:
        return context.original_route if isinstance(context.original_route, APIRoute) else None
    return APIRoute(context.path, context.endpoint, **kwargs)


def _served_route(context: Any, route: Any, checked: Mapping[Any, HeaderCheck]) -> Any:
    """The route the guard dispatches to: `route` without the credential dependencies its router attached that
    the guard itself runs (the same header check) before the route is reached, so a request is not
    authenticated twice and pays no dependency resolution for it. The app's routes and OpenAPI keep them."""
    kwargs = _route_kwargs(context)
    dependencies = (kwargs or {}).get("dependencies") or []
    kept = [d for d in dependencies if not (_hashable(d.dependency) and d.dependency in checked)]
    if kwargs is None or len(kept) == len(dependencies):
        return route
    return APIRoute(context.path, context.endpoint, **{**kwargs, "dependencies": kept})


class RequestGuard:
    """The app router's dispatcher: it finds the route once, checks the credential header and the declared
    body size against the route's policy (computed once per route), then hands the request to the route
    with a `receive` that counts the body against the limit, the body deadline and the minimum rate.

    Routes of included routers are dispatched as flat APIRoutes built once from FastAPI's own view of them
    (`iter_route_contexts`). Anything no flat route matches fully (lifespan, 404, 405, redirects, mounts)
    goes to the app's own router, with the body counted against the no-body limit.
    """

    def __init__(self, router: Any, *, checks: Mapping[Any, HeaderCheck], limits: Mapping[str, int],
                 throttle: AuthThrottle, body_timeout_s: float = 30.0, min_body_rate: float = 0.0) -> None:
        self.router, self.checks, self.limits, self.throttle = router, checks, limits, throttle
        self.body_timeout_s, self.min_body_rate = body_timeout_s, min_body_rate
        self.fallback = router.middleware_stack  # the router's own dispatch
        self._table: list[tuple[str, Any, _Policy]] | None = None
        self._built_for = -1
        self._unmatched = _Policy([], limits[NO_BODY])

    def _routes(self) -> list[tuple[str, Any, _Policy]]:
        """Every route flattened, with its literal path prefix and policy; built once (again if routes are added)."""
        if self._table is None or self._built_for != len(self.router.routes):
            table = []
            for context in iter_route_contexts(self.router.routes):
                route = _flat_route(context)
                if route is not None:
                    # The policy from every dependency of the route; the guard enforces it on each request.
                    policy = self._route_policy(route)
                    table.append((_literal_prefix(route), _served_route(context, route, self.checks), policy))
            self._table, self._built_for = table, len(self.router.routes)
        return self._table

    def _route_policy(self, route: Any) -> _Policy:
        checks = [self.checks[c] for c in _dependency_calls(route) if _hashable(c) and c in self.checks]
        extra = getattr(route, "openapi_extra", None) or {}
        name = extra.get(BODY_CLASS_KEY) or ("json" if getattr(route, "body_field", None) else NO_BODY)
        return _Policy(checks, self.limits[name])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.fallback(scope, receive, send)
            return
        # A route whose literal prefix the path lacks cannot match: a string test spares its regex.
        path, filtered = scope["path"], not scope.get("root_path")
        for prefix, route, policy in self._routes():
            if filtered and not path.startswith(prefix):
                continue
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope.update(child_scope)  # "route" included: metrics label a refusal by its route
                scope.setdefault("router", self.router)
                await self._guarded(route.handle, policy, scope, receive, send)
                return
        await self._guarded(self.fallback, self._unmatched, scope, receive, send)

    async def _guarded(self, app: ASGIApp, policy: _Policy, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._authenticate(policy, scope) if policy.checks else None
        declared, chunked = _framing(scope)
        refusal = refusal or _declared_too_large(declared, policy.limit)
        if refusal is not None:
            await _respond(send, refusal)
            return
        if declared in (None, b"0") and not chunked:
            # HTTP/1.1 framing: no Content-Length and no Transfer-Encoding means no body, so nothing to
            # count or time (receive() then waits for the disconnect only).
            await app(scope, receive, send)
            return
        await self._forward(app, scope, receive, send, policy.limit)

    def _authenticate(self, policy: _Policy, scope: Scope) -> ApiError | None:
        # The credential is checked first: a valid one always passes, so wrong tokens sent from a shared
        # address (a NAT, a proxy, another tenant) cannot lock out its legitimate callers. Only failures
        # count and only failures wait; what stops guessing is the secrets' length (>= 32 characters).
        headers = Headers(scope=scope)
        try:
            for check in policy.checks:
                check(headers)
        except ApiError as refusal:
            if refusal.status not in (401, 403):  # e.g. /metrics switched off (404): not a failed login
                return refusal
            address = (scope.get("client") or ("unknown", 0))[0]
            wait = self.throttle.retry_after(address)
            if wait is not None:
                return ApiError(429, "too_many_requests", f"too many failed authentications; retry in {wait} s",
                                {"Retry-After": str(wait)})
            self.throttle.failed(address)
            return refusal
        return None

    async def _forward(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        seen = 0
        waited = 0.0
        started = body_done = False
        timeout_s, rate = self.body_timeout_s, self.min_body_rate

        async def counted() -> Message:
            nonlocal seen, waited, body_done
            if body_done:  # after the body, receive() waits for a disconnect: no deadline
                return await receive()
            # Time counts only while the app waits for body bytes (a slow handler is not the client's fault);
            # a client that stops sending mid-body, or sends slower than the minimum rate once the grace of
            # one body timeout is spent, is answered 408 and disconnected.
            budget = timeout_s if not rate else min(timeout_s, timeout_s + seen / rate - waited)
            if budget <= 0:
                raise BodyTimeout(timeout_s, f"request body slower than {rate:g} bytes/s")
            began = time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), budget)
            except asyncio.TimeoutError:
                if budget < timeout_s:
                    raise BodyTimeout(timeout_s, f"request body slower than {rate:g} bytes/s") from None
                raise BodyTimeout(timeout_s) from None
            waited += time.monotonic() - began
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, counted, tracked)
        except (BodyTooLarge, BodyTimeout) as exc:  # raised where no handler answered it (e.g. a bare ASGI route)
            if started:
                raise
            code = "payload_too_large" if exc.status_code == 413 else "request_timeout"
            await _respond(send, ApiError(exc.status_code, code, str(exc.detail)))


def _literal_prefix(route: Any) -> str:
    """The part of a route's path before its first parameter ('' when it has no plain path)."""
    path = getattr(route, "path", None)
    return path.split("{", 1)[0] if isinstance(path, str) else ""


def _framing(scope: Scope) -> tuple[bytes | None, bool]:
    """The request's Content-Length (as sent; None without one) and whether it has a Transfer-Encoding."""
    declared, chunked = None, False
    for key, value in scope["headers"]:
        if key == b"content-length":
            declared = value
        elif key == b"transfer-encoding":
            chunked = True
    return declared, chunked


def _declared_too_large(declared: bytes | None, limit: int) -> ApiError | None:
    if declared is None:
        return None
    if not declared.isdigit():
        return ApiError(400, "bad_request", "Content-Length is not a number")
    if int(declared) > limit:
        return ApiError(413, "payload_too_large", f"request body exceeds the limit of {limit} bytes for this route")
    return None


async def _respond(send: Send, error: ApiError) -> None:
    """Answer in the error dialect and close: the unread body is never consumed."""
    body = json.dumps({"code": error.code, "detail": error.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (error.headers or {}).items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def per_process_limit(limit: int, *, workers: int) -> int:
    """One process's share of a service's failed-authentication limit: the throttle counts per process (no
    shared store), so each of `workers` processes allows limit ÷ workers (rounded up, at least 1)."""
    return max(1, math.ceil(limit / max(1, workers)))


def install_guard(app: Any, *, settings: Any, checks: Mapping[Any, HeaderCheck],
                  extra_limits: Mapping[str, int] | None = None) -> None:
    """Add the guard to an app with the body-limit classes and throttle of its settings (GuardSettings)."""
    limits = {name: getattr(settings, f"{name}_max_body_bytes")
              for name in (NO_BODY, "small", "predictions", "json", "bulk", "federation")}
    limit = per_process_limit(settings.auth_failure_limit, workers=getattr(settings, "workers", 1))
    throttle = AuthThrottle(limit=limit, window_s=settings.auth_failure_window_s)
    # The guard is the router's dispatcher (inside the app's exception handling): one route resolution per
    # request, the guard's policy looked up with it.
    app.router.middleware_stack = RequestGuard(
        app.router, checks=checks, limits={**limits, **(extra_limits or {})}, throttle=throttle,
        body_timeout_s=settings.body_timeout_s, min_body_rate=float(settings.min_body_rate_bytes_s))
