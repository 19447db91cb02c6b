"""PartyClient: the coordinator's only way to reach a party (httpx, timeouts, retries (tenacity), byte counters).

It owns the party federation API's paths: callers name a step (`configure`, `begin`, …), never a URL.
`HttpLink` binds a client to one run: the `Link` every protocol's round runs over HTTP.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections import defaultdict
from typing import Any
from urllib.parse import quote

import httpx

from services.config import CoordinatorSettings
from services.coordinator.registry import PartyEndpoint
from services.coordinator.retries import TransientAnswer, with_retries
from services.errors import PartyUnavailable, ProtocolError, raise_for
from services.federation.links import Message, Step
from services.federation.messages import (
    ConfigureRequest,
    ConfigureResponse,
    PeersRequest,
    PeersResponse,
    StartRequest,
    StartResponse,
)
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import FEDERATION_MEDIA_TYPE, pack_tree, unpack_tree
from services.protocol.tracing import REQUEST_ID_HEADER, current_request_id

PROTOCOL_HEADER = "X-Fedrec-Protocol"


def party_path(*segments: str | int) -> str:
    """An absolute path from segments, each percent-encoded whole: a caller's id can never add a
    segment ('/'), a query ('?'), a fragment ('#') or a dot segment ('..') to what a party is asked."""
    encoded = []
    for segment in map(str, segments):
        part = quote(segment, safe="")
        encoded.append(part.replace(".", "%2E") if set(segment) <= {"."} else part)
    return "/" + "/".join(encoded)


def party_tls_context(settings: CoordinatorSettings) -> ssl.SSLContext:
    """How the coordinator verifies parties (the CA bundle, else the system's) and which client certificate it shows."""
    context = ssl.create_default_context(cafile=str(settings.party_ca_file) if settings.party_ca_file else None)
    if settings.client_cert_file is not None and settings.client_key_file is not None:
        context.load_cert_chain(str(settings.client_cert_file), str(settings.client_key_file))
    return context


class PinnedTransport(httpx.BaseTransport):
    """One connection pool per pinned TLS name, so a connection verified for one party never carries another's call.

    A request's `sni_hostname` extension (a party's registered tls_name) is the name TLS checks the
    server's certificate against (hostname verification in the handshake, before any request byte
    and so before the credential is sent). Pools are keyed by that name: httpcore reuses
    connections by origin alone, and two parties may share one (a gateway, a re-pointed URL).
    """

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._verify, self._limits = verify, limits
        self._pools: dict[str | None, httpx.HTTPTransport] = {}
        self._lock = threading.Lock()

    def _pool(self, name: str | None) -> httpx.HTTPTransport:
        with self._lock:
            if name not in self._pools:
                self._pools[name] = httpx.HTTPTransport(verify=self._verify, limits=self._limits)
            return self._pools[name]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send through the pool of the request's pinned name."""
        return self._pool(request.extensions.get("sni_hostname")).handle_request(request)

    def close(self) -> None:
        """Close every pool."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class AsyncPinnedTransport(httpx.AsyncBaseTransport):
    """PinnedTransport for an AsyncClient (the serving fan-out's top-K): one pool per pinned TLS name."""

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._verify, self._limits = verify, limits
        self._pools: dict[str | None, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send through the pool of the request's pinned name (pools are made on the event loop's one thread)."""
        name = request.extensions.get("sni_hostname")
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = httpx.AsyncHTTPTransport(verify=self._verify, limits=self._limits)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        """Close every pool."""
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


def pinned(endpoint: PartyEndpoint) -> dict[str, Any]:
    """Request extensions of a call to a party: its registered tls_name as the name TLS verifies (PinnedTransport)."""
    return {"sni_hostname": endpoint.tls_name} if endpoint.tls_name else {}


def party_http_client(settings: CoordinatorSettings) -> httpx.Client:
    """The one HTTP client the coordinator reaches parties with (runs and serving fan-out)."""
    return httpx.Client(transport=PinnedTransport(verify=party_tls_context(settings),
                                                  limits=httpx.Limits(max_connections=64)))


def party_async_client(settings: CoordinatorSettings, *, connections: int = 128) -> httpx.AsyncClient:
    """The serving fan-out's asynchronous client: the same TLS verification and pinning, connections kept alive."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(transport=AsyncPinnedTransport(verify=party_tls_context(settings), limits=limits))


def _trace() -> dict[str, str]:
    """The request id bound by the caller (an API request or a training round), sent on to the party."""
    request_id = current_request_id()
    return {REQUEST_ID_HEADER: request_id} if request_id else {}


class TrafficCounter:
    """Bytes sent to / received from each party (request and response bodies), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent: dict[str, int] = defaultdict(int)
        self.received: dict[str, int] = defaultdict(int)

    def add(self, party_id: str, *, sent: int, received: int) -> None:
        """Record one exchange."""
        with self._lock:
            self.sent[party_id] += sent
            self.received[party_id] += received

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        """Copies of the two counters."""
        with self._lock:
            return dict(self.sent), dict(self.received)


class PartyClient:
    """Calls one party's federation API; transient faults are retried, then raised as PartyUnavailable."""

    def __init__(
        self, endpoint: PartyEndpoint, *, http: httpx.Client, counter: TrafficCounter,
        timeout_s: float = 120.0, max_retries: int = 3, backoff_s: float = 0.2,
    ) -> None:
        self.endpoint = endpoint
        self.http = http
        self.counter = counter
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._tls = pinned(endpoint)  # a pinned party: TLS checks its certificate against tls_name

    @property
    def party_id(self) -> str:
        """Id of the party this client talks to."""
        return self.endpoint.party_id

    def _headers(self, content_type: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.endpoint.token}",
            PROTOCOL_HEADER: PROTOCOL_VERSION,
            "Content-Type": content_type,
            **_trace(),
        }

    def _send(self, path: str, body: bytes, content_type: str) -> httpx.Response:
        """POST with retries on connection errors, timeouts and 5xx (`retries.with_retries`: jittered backoff, the
        party's Retry-After honoured); a 4xx is final and raised as what it is."""
        url = f"{self.endpoint.url}{path}"

        def attempt() -> httpx.Response:
            try:
                resp = self.http.post(url, content=body, headers=self._headers(content_type),
                                      timeout=self.timeout_s, extensions=self._tls)
            except httpx.TransportError:
                self.counter.add(self.party_id, sent=len(body), received=0)
                raise
            self.counter.add(self.party_id, sent=len(body), received=len(resp.content))
            if resp.status_code >= 500:
                raise TransientAnswer(resp)
            return resp

        try:
            resp = with_retries(attempt, max_retries=self.max_retries, backoff_s=self.backoff_s)
        except (httpx.TransportError, TransientAnswer) as exc:
            last = str(exc) if isinstance(exc, TransientAnswer) else f"{type(exc).__name__}: {exc}"
            raise PartyUnavailable(f"party {self.party_id} unavailable at {path}: {last}",
                                   extra={"party_id": self.party_id}) from exc
        self._raise_for(resp, path)
        return resp

    def _raise_for(self, resp: httpx.Response, path: str) -> None:
        """A party's 4xx as the domain error it names (its 404 stays NotFound, its 422 ValidationFailed)."""
        raise_for(resp.status_code, resp.content, source=f"party {self.party_id} refused {path}",
                  extra={"party_id": self.party_id})

    def post_json(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON body, return the JSON answer."""
        resp = self._send(path, json.dumps(payload).encode(), "application/json")
        return dict(resp.json()) if resp.content else {}

    def post_bytes(self, path: str, body: bytes = b"") -> bytes:
        """POST a binary body, return the binary answer."""
        return self._send(path, body, FEDERATION_MEDIA_TYPE).content

    def get_json(self, path: str, *, params: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
        """GET (the pre-flight) without retries; a 4xx is raised as the domain error it names."""
        try:
            resp = self.http.get(f"{self.endpoint.url}{path}", params=params, headers={**(headers or {}), **_trace()},
                                 timeout=self.timeout_s, extensions=self._tls)
        except httpx.TransportError as exc:
            raise PartyUnavailable(f"party {self.party_id} unavailable: {exc}",
                                   extra={"party_id": self.party_id}) from exc
        self.counter.add(self.party_id, sent=0, received=len(resp.content))
        if resp.status_code >= 500:
            raise PartyUnavailable(f"party {self.party_id} answered HTTP {resp.status_code}",
                                   extra={"party_id": self.party_id})
        self._raise_for(resp, path)
        return dict(resp.json()) if resp.content else {}

    # ---- the party federation API (/v1/federation): its paths are spelled here only ----------
    @staticmethod
    def _run_path(run_id: str, *step: str | int) -> str:
        return party_path("v1", "federation", "runs", run_id, *step)

    def _step_path(self, run_id: str, round_index: int, attempt: int, *step: str | int) -> str:
        return self._run_path(run_id, "rounds", round_index, *step) + f"?attempt={int(attempt)}"

    def preflight(self) -> dict[str, Any]:
        """Pre-flight: the party's id, protocol version, whether it holds data (credential and version checked)."""
        return self.get_json(party_path("v1", "federation", "preflight"),
                             headers={k: v for k, v in self._headers("application/json").items() if k != "Content-Type"})

    def psi_start(self, *, run_id: str) -> bytes:
        """PSI step 1: the party's singly-blinded user list (concatenated points)."""
        return self.post_bytes(self._run_path(run_id, "psi", "start"))

    def psi_reblind(self, *, run_id: str, points: bytes) -> bytes:
        """PSI ring step: another party's points raised to this party's secret, order kept."""
        return self.post_bytes(self._run_path(run_id, "psi", "reblind"), points)

    def psi_finish(self, *, run_id: str, body: bytes) -> int:
        """Last PSI step (npz of own and intersection tokens); returns the aligned user count."""
        return int(json.loads(self.post_bytes(self._run_path(run_id, "psi", "finish"), body))["n_users"])

    def configure(self, *, request: ConfigureRequest) -> ConfigureResponse:
        """Open a run at the party; it answers its item count and training-rating sums."""
        body = request.model_dump(exclude=None if request.warm_start else {"warm_start"})  # a cold run's as before
        return ConfigureResponse(**self.post_json(self._run_path(request.run_id, "configure"), body))

    def peers(self, *, run_id: str, request: PeersRequest) -> PeersResponse:
        """Relay every party's signed key; the party answers its sealed seed contributions."""
        return PeersResponse(**self.post_json(self._run_path(run_id, "peers"), request.model_dump()))

    def start(self, *, run_id: str, request: StartRequest) -> StartResponse:
        """Build (or restore) the party's trainer with the public totals."""
        return StartResponse(**self.post_json(self._run_path(run_id, "start"), request.model_dump()))

    def step(self, *, run_id: str, step: Step, message: Message) -> Message:
        """One round step of any protocol: the message tree out, the party's answer tree back."""
        path = self._step_path(run_id, step.round_index, step.attempt, "steps", step.name)
        if step.layer >= 0:
            path += f"&layer={int(step.layer)}"
        answer = self.post_bytes(path, pack_tree(message) if message else b"")
        try:
            return dict(unpack_tree(answer))
        except ProtocolError as exc:
            raise ProtocolError(f"{self.party_id}: malformed {step.name} answer: {exc.detail}") from exc

    def publish(self, *, run_id: str, round_index: int) -> int:
        """Store the run's serving model at the party; returns its version."""
        return int(self.post_json(self._run_path(run_id, "publish"), {"round_index": round_index})["version"])

    def keep_best(self, *, run_id: str, round_index: int) -> int:
        """Make the party keep the model of the round it just finished (the run's best so far)."""
        return int(self.post_json(self._run_path(run_id, "best"), {"round_index": round_index})["version"])

    def stage(self, *, run_id: str, round_index: int, release_id: str) -> dict[str, Any]:
        """Store the run's serving model at the party under a release, not served yet; returns its version, the
        served model's validation sums (`valid_sse`, `valid_count`: None when the party has none) and its value
        report (`value`: validation NDCG@10 per slice of its users, alone, federated and served); under DP
        neither, and `withheld` says why."""
        body = {"round_index": round_index, "release_id": release_id}
        return dict(self.post_json(self._run_path(run_id, "publish"), body))

    def activate_release(self, *, release_id: str) -> int:
        """Make the party serve the model staged under a release; returns that model's version."""
        path = party_path("v1", "federation", "releases", release_id, "activate")
        return int(self.post_json(path, {})["version"])

    def prune_releases(self, *, keep: list[str]) -> list[str]:
        """Make the party delete every staged release not in `keep` (never its active one); the ids it pruned."""
        path = party_path("v1", "federation", "releases", "prune")
        return list(self.post_json(path, {"keep": keep})["pruned"])


class HttpLink:
    """A `Link` over HTTP: one party's federation API, for one run (every protocol's steps)."""

    def __init__(self, client: PartyClient, *, run_id: str) -> None:
        self.client, self.run_id = client, run_id

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.client.party_id

    def call(self, step: Step, message: Message) -> Message:
        """Post the step's message, return the party's answer."""
        return self.client.step(run_id=self.run_id, step=step, message=message)
