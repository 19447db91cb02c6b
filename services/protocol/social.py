"""Wire contract of the social-party routes (P4GCN sandwich products).

Binary bodies (application/octet-stream): a user batch travels as .npy int64 bytes; a request that
carries users plus an encrypted matrix is framed as >I length of the users' .npy, the .npy, then
the EncryptedMatrix bytes. Big integers (n, h_s) travel as decimal strings in JSON.
Every encrypted matrix on these routes ([X], [G], [dX]) is at scale 2^FRAC_BITS (phe exponent -5).
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from services.errors import ProtocolError
from services.protocol.arrays import decode_array, encode_array

SOCIAL_MEDIA_TYPE = "application/octet-stream"
_LEN = struct.Struct(">I")
MAX_USERS_BYTES = 1 << 20
FRAC_BITS = 20


class SocialSessionCreate(BaseModel):
    """Open a social-product session: aligned users, the rating party's public key, DP plan."""

    model_config = ConfigDict(extra="forbid")

    user_ids: list[str] = Field(min_length=1, max_length=10_000_000)
    public_key_n: str = Field(pattern=r"^[0-9]{2,2000}$")
    h_s: str = Field(pattern=r"^[0-9]{2,4000}$")
    dim: int = Field(64, ge=1, le=1024)
    epsilon: float = Field(15.0, gt=0.0)
    delta: float = Field(1e-4, gt=0.0, lt=1.0)
    planned_epochs: int = Field(5, ge=1, le=100_000)
    noise_multiplier: float | None = Field(None, gt=0.0)
    dp_enabled: bool = True


class SocialSessionRead(BaseModel):
    """A session and its privacy record."""

    session_id: str
    n_users: int
    dim: int
    privacy: dict[str, float | int | str | bool | None]


def encode_users(users: np.ndarray) -> bytes:
    """A user batch as .npy int64 bytes."""
    return encode_array(np.asarray(users, dtype=np.int64))


def decode_users(data: bytes) -> np.ndarray:
    """Parse a user batch (1-D int64, no pickle)."""
    return decode_array(data, dtype=np.int64, shape=(None,), max_bytes=MAX_USERS_BYTES)


def frame(users: np.ndarray, payload: bytes) -> bytes:
    """users + encrypted matrix in one body."""
    head = encode_users(users)
    return _LEN.pack(len(head)) + head + payload


def unframe(body: bytes) -> tuple[np.ndarray, bytes]:
    """Split a framed body into (users, encrypted-matrix bytes)."""
    if len(body) < _LEN.size:
        raise ProtocolError("truncated framed body")
    (size,) = _LEN.unpack_from(body)
    if size > MAX_USERS_BYTES or _LEN.size + size > len(body):
        raise ProtocolError("bad user-batch length in framed body")
    return decode_users(body[_LEN.size:_LEN.size + size]), body[_LEN.size + size:]


class SocialHost(Protocol):
    """The social party's side of the sandwich products, as its API serves it (built through the registry)."""

    def open(self, *, request: SocialSessionCreate) -> tuple[str, Any]:
        """Open a session over the aligned users; (session id, its party)."""
        ...

    def begin_epoch(self, *, session_id: str) -> dict[str, Any]:
        """Start an epoch of a session."""
        ...

    def upload_x(self, *, session_id: str, offset: int, body: bytes) -> None:
        """Store a chunk of the encrypted X."""
        ...

    def forward(self, *, session_id: str, body: bytes) -> bytes:
        """The forward product of a framed body."""
        ...

    def backward(self, *, session_id: str, body: bytes) -> bytes:
        """The backward product of a framed body."""
        ...

    def update(self, *, session_id: str, body: bytes) -> None:
        """Apply an encrypted update to X."""
        ...

    def budget_summary(self) -> dict[str, Any]:
        """The social graph's lifetime privacy ledger."""
        ...

    def privacy(self, *, session_id: str) -> dict[str, Any]:
        """A session's privacy record."""
        ...

    def forget(self, external_id: str) -> None:
        """After an erasure: close the sessions built over the user."""
        ...

    def close_all(self) -> None:
        """Stop every session's worker processes."""
        ...

