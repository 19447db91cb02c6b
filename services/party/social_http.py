"""HTTP implementation of SocialProductBackend: the rating party calls a social party's /v1/social routes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from services.crypto.paillier import EncryptedMatrix, PackedResult
from services.errors import (
    Conflict,
    CryptoError,
    NotFound,
    PartyUnavailable,
    PrivacyBudgetExhausted,
    ProtocolError,
    ValidationFailed,
)
from services.party.social_paillier import PaillierSession
from services.protocol.social import SOCIAL_MEDIA_TYPE, SocialSessionCreate, encode_users, frame


def _raise_for(resp: httpx.Response) -> None:
    """Map the social party's error bodies back to domain errors."""
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:
        body = {}
    detail = str(body.get("detail", resp.text[:200]))
    code = body.get("code", "")
    extra = {k: v for k, v in body.items() if k not in ("code", "detail")}
    if code == PrivacyBudgetExhausted.code:
        raise PrivacyBudgetExhausted(detail, extra=extra)
    if resp.status_code == 404:
        raise NotFound(detail)
    if resp.status_code == 409:
        raise (ProtocolError if code == ProtocolError.code else Conflict)(detail, extra=extra)
    if code == CryptoError.code:
        raise CryptoError(detail)
    if resp.status_code in (413, 422):
        raise ValidationFailed(detail)
    raise PartyUnavailable(f"social party answered {resp.status_code}: {detail}")


class HttpSocialBackend:
    """Encrypts with the rating party's key, sends binary bodies, decrypts the packed products."""

    def __init__(self, *, base_url: str, token: str, session: PaillierSession, user_ids: Sequence[str],
                 epsilon: float, delta: float, planned_epochs: int, dim: int = 64, clip_norm: float = 1.0,
                 dp_enabled: bool = True, noise_multiplier: float | None = None, chunk_rows: int = 256, client: httpx.Client | None = None,
                 timeout_s: float = 600.0) -> None:
        self.session, self.clip_norm, self.chunk_rows = session, clip_norm, chunk_rows
        self.client = client or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.bytes_up = self.bytes_down = 0
        req = SocialSessionCreate(user_ids=list(user_ids), public_key_n=str(session.public_key.n),
                                  h_s=str(session.h_s), dim=dim, epsilon=epsilon, delta=delta,
                                  planned_epochs=planned_epochs, dp_enabled=dp_enabled,
                                  noise_multiplier=noise_multiplier)
        resp = self.client.post("/v1/social/sessions", json=req.model_dump(), headers=self.headers)
        _raise_for(resp)
        self.session_id: str = resp.json()["session_id"]
        self.record: dict[str, Any] = resp.json()["privacy"]

    def _post(self, method: str, path: str, body: bytes | None = None, **params: Any) -> httpx.Response:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = SOCIAL_MEDIA_TYPE
            self.bytes_up += len(body)
        resp = self.client.request(method, f"/v1/social/sessions/{self.session_id}{path}", content=body,
                                   headers=headers, params=params or None)
        _raise_for(resp)
        self.bytes_down += len(resp.content)
        return resp

    def _decrypt(self, resp: httpx.Response) -> np.ndarray:
        return self.session.decrypt(PackedResult.from_bytes(self.session.public_key, resp.content))

    def _enc(self, m: np.ndarray, bound: float) -> EncryptedMatrix:
        return self.session.encrypt(m, bound)

    def begin_epoch(self, x: np.ndarray) -> None:
        """Open an epoch and upload [X] in row chunks."""
        self._post("POST", "/epochs")
        enc = self._enc(x, self.clip_norm)
        for start in range(0, x.shape[0], self.chunk_rows):
            stop = min(start + self.chunk_rows, x.shape[0])
            self._post("PUT", "/x", enc.take_rows(range(start, stop)).to_bytes(), offset=start)

    def forward(self, users: np.ndarray) -> np.ndarray:
        """Decrypted noisy forward product."""
        return self._decrypt(self._post("POST", "/forward", encode_users(users)))

    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Decrypted noisy backward product for [G]."""
        body = frame(users, self._enc(grad, self.clip_norm).to_bytes())
        return self._decrypt(self._post("POST", "/backward", body))

    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None:
        """Encrypted row updates of X at the social party."""
        self._post("POST", "/x/updates", frame(users, self._enc(delta, 2.0 * self.clip_norm).to_bytes()))

    def privacy(self) -> dict[str, Any]:
        """The social party's privacy record."""
        return dict(self._post("GET", "/privacy").json())

    def traffic(self) -> dict[str, int]:
        """HTTP body bytes sent / received (ciphertexts dominate)."""
        return {"bytes_to_social": self.bytes_up, "bytes_from_social": self.bytes_down}

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
