"""The rating party's view of the social party: the SocialProductBackend abstraction.

A backend takes the rating party's plaintext matrices (already clipped to the public norm C),
does whatever encryption its transport needs, and returns decrypted noisy products:
  begin_epoch(X) -> uploads X once;  forward(B) -> (B L) X W_P2 + Z;
  backward(B, G) -> (B L B^T) G W_P2^T + Z';  update_rows(B, dX) -> X[B] += dX at the social party.
Implementations: `InProcessBackend` (direct calls; plaintext engine, or Paillier via
`services.party.social_paillier`) and `HttpSocialBackend` (services.party.social_http).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from services.party.social import SocialParty


class SocialProductBackend(Protocol):
    """What the P4GCN trainer needs from the social party."""

    def begin_epoch(self, x: np.ndarray) -> None: ...
    def forward(self, users: np.ndarray) -> np.ndarray: ...
    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray: ...
    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None: ...
    def privacy(self) -> dict[str, Any]: ...
    def traffic(self) -> dict[str, int]: ...


class InProcessBackend:
    """Direct calls into a SocialParty with a plaintext engine (no-crypto reference, fast experiments)."""

    def __init__(self, party: SocialParty, *, chunk_rows: int = 512) -> None:
        self.party = party
        self.chunk_rows = chunk_rows

    def begin_epoch(self, x: np.ndarray) -> None:
        """Open an epoch and upload X in row chunks."""
        self.party.begin_epoch()
        for start in range(0, x.shape[0], self.chunk_rows):
            self.party.upload_x(start, x[start:start + self.chunk_rows])

    def forward(self, users: np.ndarray) -> np.ndarray:
        """Noisy forward product for the batch."""
        return np.asarray(self.party.forward(users))

    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Noisy backward product for the batch."""
        return np.asarray(self.party.backward(users, grad))

    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None:
        """Apply row updates to the social party's copy of X."""
        self.party.update_x(users, delta)

    def privacy(self) -> dict[str, Any]:
        """The social party's privacy record."""
        return self.party.privacy_record()

    def traffic(self) -> dict[str, int]:
        """Bytes the social party received / sent (float64 payloads on this path)."""
        return {"bytes_to_social": self.party.engine.bytes_in, "bytes_from_social": self.party.engine.bytes_out}
