"""The rating party's encrypted backend over HTTP: a SocialClient session under the rating party's key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from services.p4gcn.backends import EncryptedBackend
from services.p4gcn.client import SocialClient
from services.p4gcn.keys import PaillierSession
from services.protocol.social import SocialSessionCreate


class HttpSocialBackend(EncryptedBackend):
    """Opens a session at the social party (public key, h_s, DP plan), then encrypts, sends, decrypts."""

    def __init__(self, *, base_url: str, token: str, session: PaillierSession, user_ids: Sequence[str],
                 epsilon: float, delta: float, planned_epochs: int, dim: int = 64, clip_norm: float = 1.0,
                 dp_enabled: bool = True, noise_multiplier: float | None = None, chunk_rows: int = 256,
                 client: httpx.Client | None = None, timeout_s: float = 600.0) -> None:
        self.client = SocialClient(base_url=base_url, token=token, client=client, timeout_s=timeout_s)
        req = SocialSessionCreate(user_ids=list(user_ids), public_key_n=str(session.public_key.n),
                                  h_s=str(session.h_s), dim=dim, epsilon=epsilon, delta=delta,
                                  planned_epochs=planned_epochs, dp_enabled=dp_enabled,
                                  noise_multiplier=noise_multiplier)
        read = self.client.open(req)
        super().__init__(self.client, session, clip_norm=clip_norm, chunk_rows=chunk_rows)
        self.session_id: str = read.session_id
        self.record: dict[str, Any] = dict(read.privacy)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
