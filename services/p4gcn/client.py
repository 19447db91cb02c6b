"""HTTP client of one session on a social party's /v1/social routes: the only place their URL paths live.

Implements the byte-level `SocialTransport` of services.p4gcn.backends (the encrypted backend runs
over it, services.p4gcn.http) and counts the body bytes it sends and receives.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from services.errors import raise_for
from services.protocol.social import (
    SOCIAL_MEDIA_TYPE,
    SocialSessionCreate,
    SocialSessionRead,
    encode_users,
    frame,
)

SESSIONS = "/v1/social/sessions"


class SocialClient:
    """One social session over HTTP (opened by `open`); error answers become domain errors (`raise_for`)."""

    def __init__(self, *, base_url: str, token: str, client: httpx.Client | None = None,
                 timeout_s: float = 600.0) -> None:
        self.client = client or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.session_id = ""
        self.bytes_up = self.bytes_down = 0

    def open(self, request: SocialSessionCreate) -> SocialSessionRead:
        """POST /v1/social/sessions: the session this client talks to from now on."""
        resp = self.client.post(SESSIONS, json=request.model_dump(), headers=self.headers)
        raise_for(resp.status_code, resp.content, source=f"social party refused POST {SESSIONS}")
        read = SocialSessionRead.model_validate(resp.json())
        self.session_id = read.session_id
        return read

    def _call(self, method: str, path: str, body: bytes | None = None, **params: Any) -> httpx.Response:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = SOCIAL_MEDIA_TYPE
            self.bytes_up += len(body)
        url = f"{SESSIONS}/{self.session_id}{path}"
        resp = self.client.request(method, url, content=body, headers=headers, params=params or None)
        raise_for(resp.status_code, resp.content, source=f"social party refused {method} {url}")
        self.bytes_down += len(resp.content)
        return resp

    def open_epoch(self) -> None:
        """POST .../epochs."""
        self._call("POST", "/epochs")

    def put_x(self, offset: int, chunk: bytes) -> None:
        """PUT .../x?offset=: one chunk of [X]."""
        self._call("PUT", "/x", chunk, offset=offset)

    def forward(self, users: np.ndarray) -> bytes:
        """POST .../forward: the packed forward product."""
        return self._call("POST", "/forward", encode_users(users)).content

    def backward(self, users: np.ndarray, grad: bytes) -> bytes:
        """POST .../backward: the packed backward product for [G]."""
        return self._call("POST", "/backward", frame(users, grad)).content

    def update(self, users: np.ndarray, delta: bytes) -> None:
        """POST .../x/updates: [X_B] += [dX_B]."""
        self._call("POST", "/x/updates", frame(users, delta))

    def privacy(self) -> dict[str, Any]:
        """GET .../privacy."""
        return dict(self._call("GET", "/privacy").json())

    def traffic(self) -> dict[str, int]:
        """HTTP body bytes sent / received (ciphertexts dominate)."""
        return {"bytes_to_social": self.bytes_up, "bytes_from_social": self.bytes_down}

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
