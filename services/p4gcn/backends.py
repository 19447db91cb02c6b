"""The rating party's view of the social party: SocialProductBackend and its implementations.

A backend takes the rating party's plaintext matrices (already clipped to the public norm C),
does whatever encryption its transport needs, and returns decrypted noisy products:
  begin_epoch(X) -> uploads X once, in row chunks (`upload_chunks`: the one upload loop);
  forward(B) -> (B L) X W_P2 + Z;  backward(B, G) -> (B L B^T) G W_P2^T + Z';
  update_rows(B, dX) -> X[B] += dX at the social party.
Implementations: `InProcessBackend` (direct calls, plaintext engine) and `EncryptedBackend`
(Paillier under the rating party's key) over a byte-level `SocialTransport`: `InProcessTransport`
(a SocialParty in this process) or the HTTP client (services.p4gcn.client, services.p4gcn.http).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from phe import PaillierPublicKey

from services.crypto.paillier import EncryptedMatrix, PackedResult
from services.p4gcn.engines import PlainEngine
from services.p4gcn.keys import PaillierSession
from services.p4gcn.party import SocialParty, SocialPartyConfig


class SocialProductBackend(Protocol):
    """What the P4GCN trainer needs from the social party."""

    def begin_epoch(self, x: np.ndarray) -> None: ...
    def forward(self, users: np.ndarray) -> np.ndarray: ...
    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray: ...
    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None: ...
    def privacy(self) -> dict[str, Any]: ...
    def traffic(self) -> dict[str, int]: ...


def upload_chunks(x: np.ndarray | EncryptedMatrix, chunk_rows: int, put: Callable[[int, Any], None]) -> None:
    """Send X (plain or encrypted) as put(offset, rows [offset, offset + chunk_rows)) for each chunk in order."""
    rows = x.shape[0]
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        put(start, x.take_rows(range(start, stop)) if isinstance(x, EncryptedMatrix) else x[start:stop])


class InProcessBackend:
    """Direct calls into a SocialParty with a plaintext engine (no-crypto reference, fast experiments)."""

    def __init__(self, party: SocialParty, *, chunk_rows: int = 512) -> None:
        self.party = party
        self.chunk_rows = chunk_rows

    def begin_epoch(self, x: np.ndarray) -> None:
        """Open an epoch and upload X in row chunks."""
        self.party.begin_epoch()
        upload_chunks(x, self.chunk_rows, self.party.upload_x)

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


def plain_backend(adjacency: sp.spmatrix, *, epsilon: float, delta: float, dp_enabled: bool, epochs: int,
                  clip_norm: float, seed: int, dim: int = 64, backward: bool = True) -> InProcessBackend:
    """A social party with a plaintext engine (identical noise to the Paillier path), called in-process."""
    cfg = SocialPartyConfig(dim=dim, backward_enabled=backward, epsilon_budget=epsilon, delta=delta,
                            dp_enabled=dp_enabled, planned_epochs=epochs, clip_norm=clip_norm)
    party = SocialParty(config=cfg, adjacency=adjacency, engine=PlainEngine(clip_norm),
                        rng=np.random.default_rng([seed, 11]))
    return InProcessBackend(party)


class SocialTransport(Protocol):
    """Byte-level link to one social session: ciphertext bytes out, packed-product bytes back."""

    def open_epoch(self) -> None: ...
    def put_x(self, offset: int, chunk: bytes) -> None: ...
    def forward(self, users: np.ndarray) -> bytes: ...
    def backward(self, users: np.ndarray, grad: bytes) -> bytes: ...
    def update(self, users: np.ndarray, delta: bytes) -> None: ...
    def privacy(self) -> dict[str, Any]: ...
    def traffic(self) -> dict[str, int]: ...


class EncryptedBackend:
    """Encrypts with the rating party's key, sends EncryptedMatrix bytes, decrypts the packed products."""

    def __init__(self, transport: SocialTransport, session: PaillierSession, *, clip_norm: float,
                 chunk_rows: int = 256) -> None:
        self.transport, self.session, self.clip_norm, self.chunk_rows = transport, session, clip_norm, chunk_rows

    def _decrypt(self, blob: bytes) -> np.ndarray:
        return self.session.decrypt(PackedResult.from_bytes(self.session.public_key, blob))

    def _encrypt(self, m: np.ndarray, bound: float) -> bytes:
        return self.session.encrypt(m, bound).to_bytes()

    def begin_epoch(self, x: np.ndarray) -> None:
        """Open an epoch, encrypt X once and upload [X] in row chunks."""
        self.transport.open_epoch()
        enc = self.session.encrypt(x, self.clip_norm)
        upload_chunks(enc, self.chunk_rows, lambda start, chunk: self.transport.put_x(start, chunk.to_bytes()))

    def forward(self, users: np.ndarray) -> np.ndarray:
        """Decrypted noisy forward product."""
        return self._decrypt(self.transport.forward(users))

    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Encrypt G, get the decrypted noisy backward product."""
        return self._decrypt(self.transport.backward(users, self._encrypt(grad, self.clip_norm)))

    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None:
        """Encrypt the row deltas and let the social party add them homomorphically."""
        self.transport.update(users, self._encrypt(delta, 2.0 * self.clip_norm))

    def privacy(self) -> dict[str, Any]:
        """The social party's privacy record."""
        return dict(self.transport.privacy())

    def traffic(self) -> dict[str, int]:
        """Bytes sent to / received from the social party, as the transport counts them."""
        return self.transport.traffic()


class InProcessTransport:
    """A SocialParty over the Paillier engine in this process; every message still goes through its bytes."""

    def __init__(self, party: SocialParty, public_key: PaillierPublicKey) -> None:
        self.party, self.public_key = party, public_key
        self.bytes_up = self.bytes_down = 0

    def _matrix(self, blob: bytes) -> EncryptedMatrix:
        self.bytes_up += len(blob)
        return EncryptedMatrix.from_bytes(self.public_key, blob)

    def _result(self, result: Any) -> bytes:
        assert isinstance(result, PackedResult)
        blob = result.to_bytes()
        self.bytes_down += len(blob)
        return blob

    def open_epoch(self) -> None:
        """Open an epoch at the party."""
        self.party.begin_epoch()

    def put_x(self, offset: int, chunk: bytes) -> None:
        """Store one chunk of [X]."""
        self.party.upload_x(offset, self._matrix(chunk))

    def forward(self, users: np.ndarray) -> bytes:
        """Packed forward product."""
        return self._result(self.party.forward(users))

    def backward(self, users: np.ndarray, grad: bytes) -> bytes:
        """Packed backward product for [G]."""
        return self._result(self.party.backward(users, self._matrix(grad)))

    def update(self, users: np.ndarray, delta: bytes) -> None:
        """[X_B] += [dX_B] at the party."""
        self.party.update_x(users, self._matrix(delta))

    def privacy(self) -> dict[str, Any]:
        """The party's privacy record."""
        return self.party.privacy_record()

    def traffic(self) -> dict[str, int]:
        """Serialised matrix bytes sent to / received from the social party."""
        return {"bytes_to_social": self.bytes_up, "bytes_from_social": self.bytes_down}


class InProcessPaillierBackend(EncryptedBackend):
    """Rating-party backend over the encrypted path, with the social party in this process."""

    def __init__(self, party: SocialParty, session: PaillierSession, *, clip_norm: float, chunk_rows: int = 256) -> None:
        super().__init__(InProcessTransport(party, session.public_key), session, clip_norm=clip_norm,
                         chunk_rows=chunk_rows)
        self.party = party
