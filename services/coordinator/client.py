"""PartyClient: the coordinator's only way to reach a party (httpx, timeouts, retries with backoff, byte counters).

It owns the party federation API's paths: callers name a step (`configure`, `begin`, …), never a URL.
`HttpPartyLink` binds a client to one run, as the round sequence's PartyLink over HTTP.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from urllib.parse import quote
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import httpx
import numpy as np

from services.config import CoordinatorSettings
from services.coordinator.registry import PartyEndpoint
from services.errors import PartyUnavailable, raise_for
from services.protocol import PROTOCOL_VERSION
from services.protocol.arrays import decode_array, encode_array
from services.protocol.federation import FEDERATION_MEDIA_TYPE, pack_tree
from services.protocol.tracing import REQUEST_ID_HEADER, current_request_id
from services.verfedgnn.messages import (
    ConfigureRequest,
    ConfigureResponse,
    MaskedStepRequest,
    PeersRequest,
    PeersResponse,
    RecoveryRequest,
    StartRequest,
    StartResponse,
    decode_upload,
)
from services.verfedgnn.types import GradientUpload

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


def party_http_client(settings: CoordinatorSettings) -> httpx.Client:
    """The one HTTP client the coordinator reaches parties with (runs and serving fan-out)."""
    return httpx.Client(limits=httpx.Limits(max_connections=64), verify=party_tls_context(settings))


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
        """POST with retries on connection errors, timeouts and 5xx; a 4xx is final and raised as what it is."""
        url = f"{self.endpoint.url}{path}"
        last: str = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                resp = self.http.post(url, content=body, headers=self._headers(content_type),
                                      timeout=self.timeout_s)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                self.counter.add(self.party_id, sent=len(body), received=0)
                continue
            self.counter.add(self.party_id, sent=len(body), received=len(resp.content))
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            self._raise_for(resp, path)
            return resp
        raise PartyUnavailable(f"party {self.party_id} unavailable at {path}: {last}",
                               extra={"party_id": self.party_id})

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
        """GET (used by serving fan-out) without retries; a 4xx is raised as the domain error it names."""
        try:
            resp = self.http.get(f"{self.endpoint.url}{path}", params=params, headers={**(headers or {}), **_trace()},
                                 timeout=self.timeout_s)
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

    def recommendations(self, *, user_id: str, k: int) -> dict[str, Any]:
        """Serving fan-out: the party's top-k for a user, asked with the coordinator's credential."""
        return self.get_json(party_path("v1", "users", user_id, "recommendations"), params={"k": k},
                             headers={"Authorization": f"Bearer {self.endpoint.token}"})

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
        return ConfigureResponse(**self.post_json(self._run_path(request.run_id, "configure"), request.model_dump()))

    def peers(self, *, run_id: str, request: PeersRequest) -> PeersResponse:
        """Relay every party's signed key; the party answers its sealed seed contributions."""
        return PeersResponse(**self.post_json(self._run_path(run_id, "peers"), request.model_dump()))

    def start(self, *, run_id: str, request: StartRequest) -> StartResponse:
        """Build (or restore) the party's trainer with the public totals."""
        return StartResponse(**self.post_json(self._run_path(run_id, "start"), request.model_dump()))

    def begin(self, *, run_id: str, round_index: int, attempt: int, public: bytes) -> None:
        """Round step: the packed public parameters down."""
        self.post_bytes(self._step_path(run_id, round_index, attempt, "begin"), public)

    def projection(self, *, run_id: str, round_index: int, attempt: int, layer: int) -> np.ndarray:
        """Round step: the party's projected aggregate Y_p^k up."""
        path = self._step_path(run_id, round_index, attempt, "layers", layer, "projection")
        return decode_array(self.post_bytes(path), dtype=np.float32)

    def others(self, *, run_id: str, round_index: int, attempt: int, layer: int, others: np.ndarray) -> None:
        """Round step: the relayed sum of the other parties' projections down."""
        self.post_bytes(self._step_path(run_id, round_index, attempt, "layers", layer, "others"), encode_array(others))

    def finish(self, *, run_id: str, round_index: int, attempt: int) -> GradientUpload:
        """Round step: the party's protected gradients and metric sums up (checked to be its own, this round)."""
        data = self.post_bytes(self._step_path(run_id, round_index, attempt, "finish"))
        return decode_upload(data, party_id=self.party_id, round_index=round_index)

    def masked_projection(self, *, run_id: str, round_index: int, attempt: int, layer: int,
                          participants: list[str]) -> np.ndarray:
        """Masked round step: the party's masked Y_p^k up."""
        path = self._step_path(run_id, round_index, attempt, "layers", layer, "masked")
        body = json.dumps(MaskedStepRequest(participants=participants).model_dump()).encode()
        return decode_array(self._send(path, body, "application/json").content, dtype=np.uint64)

    def total(self, *, run_id: str, round_index: int, attempt: int, layer: int, total: np.ndarray,
              participants: list[str]) -> None:
        """Masked round step: the unmasked sum of the projections and who contributed to it down."""
        body = pack_tree({"total": np.asarray(total, np.float64), "participants": np.array(participants, dtype=str)})
        self.post_bytes(self._step_path(run_id, round_index, attempt, "layers", layer, "total"), body)

    def masked_finish(self, *, run_id: str, round_index: int, attempt: int, participants: list[str]) -> np.ndarray:
        """Masked round step: gradients, loss and metric sums, masked, up."""
        path = self._step_path(run_id, round_index, attempt, "masked-finish")
        body = json.dumps(MaskedStepRequest(participants=participants).model_dump()).encode()
        return decode_array(self._send(path, body, "application/json").content, dtype=np.uint64)

    def recovery(self, *, run_id: str, round_index: int, attempt: int, request: RecoveryRequest) -> np.ndarray:
        """A survivor's step masks with parties that dropped out."""
        path = self._step_path(run_id, round_index, attempt, "recovery")
        return decode_array(self._send(path, json.dumps(request.model_dump()).encode(), "application/json").content,
                            dtype=np.uint64)

    def publish(self, *, run_id: str, round_index: int) -> int:
        """Store the run's serving model at the party; returns its version."""
        return int(self.post_json(self._run_path(run_id, "publish"), {"round_index": round_index})["version"])


class HttpPartyLink:
    """The round sequence's PartyLink over HTTP: one party's federation API, for one run."""

    def __init__(self, client: PartyClient, *, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.client.party_id

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Public parameters down (npz)."""
        self.client.begin(run_id=self.run_id, round_index=round_index, attempt=attempt, public=pack_tree(dict(public)))

    def projection(self, *, round_index: int, attempt: int, layer: int) -> np.ndarray:
        """Y_p^k up."""
        return self.client.projection(run_id=self.run_id, round_index=round_index, attempt=attempt, layer=layer)

    def others(self, *, round_index: int, attempt: int, layer: int, others: np.ndarray) -> None:
        """The relayed sum of the other parties' projections down."""
        self.client.others(run_id=self.run_id, round_index=round_index, attempt=attempt, layer=layer, others=others)

    def finish(self, *, round_index: int, attempt: int) -> GradientUpload:
        """Protected gradients and metric sums up."""
        return self.client.finish(run_id=self.run_id, round_index=round_index, attempt=attempt)

    def masked_projection(self, *, round_index: int, attempt: int, layer: int, participants: list[str]
                          ) -> np.ndarray:
        """Masked Y_p^k up."""
        return self.client.masked_projection(run_id=self.run_id, round_index=round_index, attempt=attempt,
                                             layer=layer, participants=participants)

    def total(self, *, round_index: int, attempt: int, layer: int, total: np.ndarray,
              participants: list[str]) -> None:
        """The unmasked sum of the projections down."""
        self.client.total(run_id=self.run_id, round_index=round_index, attempt=attempt, layer=layer, total=total,
                          participants=participants)

    def masked_finish(self, *, round_index: int, attempt: int, participants: list[str]) -> np.ndarray:
        """Masked gradients, loss and metric sums up."""
        return self.client.masked_finish(run_id=self.run_id, round_index=round_index, attempt=attempt,
                                         participants=participants)

    def recovery(self, *, round_index: int, attempt: int, step: str, layer: int, dropped: list[str],
                 size: int) -> np.ndarray:
        """A survivor's step masks with dropped parties."""
        request = RecoveryRequest(step=step, layer=layer, dropped=dropped, size=size)  # type: ignore[arg-type]
        return self.client.recovery(run_id=self.run_id, round_index=round_index, attempt=attempt, request=request)
