"""API processes forward the coordinator's stateful routes to the party's federation process.

A party's run state (trainers, step cache, PSI and social sessions) lives in the memory of exactly
one federation process; processes of role `api` hold none of it, so each of them, whichever gets a
connection, streams a federation call on to that process and its answer back: status, body and
headers as they are, the request id kept, one deadline per call. The caller's credential is checked
here first (the route's dependencies, run by the request guard) and again by the federation process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api_common.errors import ApiError
from api_common.guard import body_class
from api_common.params import IdPath
from party_api.deps import AdminOrCoordinatorDep, CacheDep, CoordinatorDep
from services.protocol.tracing import REQUEST_ID_HEADER, current_request_id

CONNECT_TIMEOUT_S = 5.0
# Hop-by-hop headers belong to one connection; date, server and the request id are set by this process.
_REQUEST_DROP = frozenset({"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
                           "transfer-encoding", "upgrade", "host", REQUEST_ID_HEADER.lower()})
_RESPONSE_DROP = frozenset({"connection", "keep-alive", "proxy-authenticate", "te", "trailer", "transfer-encoding",
                            "upgrade", "date", "server", REQUEST_ID_HEADER.lower()})
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
AfterHook = Callable[[int], Awaitable[None]]


class FederationForwarder:
    """One pooled async client to the federation process (None: this process has no federation URL)."""

    def __init__(self, *, url: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/") if url else None
        self.timeout_s = timeout_s
        self.client = (httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
                                         limits=httpx.Limits(max_connections=64), trust_env=False)
                       if url else None)

    async def close(self) -> None:
        """Close the pool (the app's lifespan)."""
        if self.client is not None:
            await self.client.aclose()

    async def forward(self, request: Request, *, after: AfterHook | None = None) -> Response:
        """Stream the request to the federation process and its answer back; 503/504 when it cannot."""
        if self.client is None or self.url is None:
            raise ApiError(503, "federation_not_configured",
                           "this party process has PARTY_PROCESS_ROLE=api and no PARTY_FEDERATION_URL: federation "
                           "routes are served by the party's federation process (register its URL, or set "
                           "PARTY_FEDERATION_URL here)")
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string") or b""
        target = self.url + raw_path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in _REQUEST_DROP]
        request_id = current_request_id()
        if request_id:
            headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
        upstream = self.client.build_request(request.method, target, headers=headers, content=request.stream())
        try:
            answer = await self.client.send(upstream, stream=True)
        except httpx.TimeoutException as exc:
            raise ApiError(504, "federation_timeout",
                           f"the party's federation process did not answer within {self.timeout_s:g}s "
                           f"({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ApiError(503, "federation_unavailable",
                           f"the party's federation process is unreachable ({type(exc).__name__}); retry",
                           headers={"Retry-After": "1"}) from exc
        try:
            if after is not None:
                await after(answer.status_code)
        except BaseException:
            await answer.aclose()
            raise
        kept = [(k, v) for k, v in answer.headers.raw if k.decode("latin-1").lower() not in _RESPONSE_DROP]

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:  # also when the caller goes away mid-answer: the connection returns to the pool
                await answer.aclose()

        response = StreamingResponse(body(), status_code=answer.status_code)
        response.raw_headers = kept  # as the federation process sent them (content-length included)
        return response


def forwarding_routers(forwarder: FederationForwarder) -> list[APIRouter]:
    """The routes an `api` process forwards: /v1/federation/*, /v1/social/*, user erasure (first match wins)."""
    coordinator = APIRouter(dependencies=[CoordinatorDep], include_in_schema=False)
    # Erasure takes what the route it forwards to takes: the admin token or the coordinator's credential
    # (the coordinator's federation-wide erasure), so a party with API workers erases like one without.
    erasure = APIRouter(dependencies=[AdminOrCoordinatorDep], include_in_schema=False)

    @coordinator.post("/v1/federation/runs/{run_id}/publish", openapi_extra=body_class("small"))
    async def publish(request: Request, cache: CacheDep) -> Response:
        """Publish at the federation process; this process serves the new model from the answer on."""
        async def refresh(status: int) -> None:
            if 200 <= status < 300:
                await run_in_threadpool(cache.refresh)
        return await forwarder.forward(request, after=refresh)

    @coordinator.api_route("/v1/federation/{path:path}", methods=METHODS, openapi_extra=body_class("federation"))
    async def federation(request: Request) -> Response:
        """Every other federation step: run state lives in the federation process."""
        return await forwarder.forward(request)

    @coordinator.api_route("/v1/social/{path:path}", methods=METHODS, openapi_extra=body_class("social"))
    async def social(request: Request) -> Response:
        """Social-product sessions live in the federation process too."""
        return await forwarder.forward(request)

    @erasure.delete("/v1/users/{external_id}")
    async def erase(external_id: IdPath, request: Request, cache: CacheDep) -> Response:
        """Erasure runs where the run state is (it drops the user from it); this process forgets at once."""
        async def forget(status: int) -> None:
            if 200 <= status < 300:
                cache.forget_user(external_id)
        return await forwarder.forward(request, after=forget)

    return [coordinator, erasure]
