"""The social party's product engines: where X lives and how the two sandwich products are computed.

`PlainEngine` holds X in plaintext (no-crypto reference, fast experiments); `PaillierEngine` holds [X]
as Paillier ciphertexts under the rating party's key (row chunks, range-checked), computes
[(B L) X W_P2 + Z] and [(B L B^T) G W_P2^T + Z'] with `paillier.sandwich_product` (packed,
re-randomised outputs) and applies [X_B] <- [X_B] + [dX_B] with `homomorphic_update`. Both engines
receive the same noise from the SocialParty, so the two paths release the same law.
Privacy: on the Paillier path the social party sees only ciphertexts (IND-CPA under DCR + the DJN
short-exponent assumption); the rating party sees J + Z only. Public bounds (row norm C of [X] and
G, max row l1 of L_sym, spectral norm C of W_P2, |Z| <= noise_bound) size the slots, so the slot
width reveals nothing data-dependent; noise is truncated at noise_bound (>= 12 sigma: negligible mass).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from services.crypto import paillier
from services.crypto.paillier import EncryptedMatrix, PackedResult, SparseRows, fixed_point
from services.crypto.paillier.matrix import ciphertext_bytes
from services.errors import CryptoError, ProtocolError, ValidationFailed
from services.protocol.social import FRAC_BITS


class ProductEngine(Protocol):
    """Where X lives (plaintext or ciphertext) and how the two sandwich products are computed."""

    bytes_in: int
    bytes_out: int

    def start(self, n_rows: int, dim: int) -> None: ...
    def put_rows(self, offset: int, chunk: Any) -> None: ...
    def complete(self) -> bool: ...
    def forward(self, left: sp.csr_matrix, right: np.ndarray, noise: np.ndarray) -> Any: ...
    def backward(self, left: sp.csr_matrix, middle: Any, right: np.ndarray, noise: np.ndarray) -> Any: ...
    def add_rows(self, users: np.ndarray, delta: Any) -> None: ...


class PlainEngine:
    """X in plaintext at the social party (reference path; same noise as the encrypted path)."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = clip_norm
        self.x: np.ndarray | None = None
        self.filled: np.ndarray | None = None
        self.bytes_in = self.bytes_out = 0

    def start(self, n_rows: int, dim: int) -> None:
        """Allocate an empty X."""
        self.x = np.zeros((n_rows, dim))
        self.filled = np.zeros(n_rows, dtype=bool)

    def _check_rows(self, rows: np.ndarray) -> np.ndarray:
        arr = np.asarray(rows, dtype=np.float64)
        if arr.ndim != 2 or (self.x is not None and arr.shape[1] != self.x.shape[1]):
            raise ValidationFailed(f"rows of shape {arr.shape} do not match dim")
        if not np.isfinite(arr).all():
            raise ValidationFailed("rows contain NaN or infinity")
        if arr.size and float(np.linalg.norm(arr, axis=1).max()) > self.clip_norm * (1 + 1e-6):
            raise ValidationFailed(f"a row exceeds the clipping norm {self.clip_norm}")
        return arr

    def put_rows(self, offset: int, chunk: Any) -> None:
        """Store a chunk of X rows at `offset`."""
        assert self.x is not None and self.filled is not None
        arr = self._check_rows(chunk)
        if offset < 0 or offset + arr.shape[0] > self.x.shape[0]:
            raise ValidationFailed(f"chunk rows [{offset}, {offset + arr.shape[0]}) outside X")
        self.x[offset:offset + arr.shape[0]] = arr
        self.filled[offset:offset + arr.shape[0]] = True
        self.bytes_in += arr.size * 8

    def complete(self) -> bool:
        """Whether every row of X has been uploaded."""
        return self.filled is not None and bool(self.filled.all())

    def forward(self, left: sp.csr_matrix, right: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """(B L) X W + Z."""
        assert self.x is not None
        out = np.asarray(left @ self.x) @ right + noise
        self.bytes_out += out.size * 8
        return out

    def backward(self, left: sp.csr_matrix, middle: Any, right: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """(B L B^T) G W^T + Z'."""
        g = self._check_rows(middle)
        self.bytes_in += g.size * 8
        out = np.asarray(left @ g) @ right + noise
        self.bytes_out += out.size * 8
        return out

    def add_rows(self, users: np.ndarray, delta: Any) -> None:
        """X[users] += delta, refusing results outside the clipping norm."""
        assert self.x is not None
        d = np.asarray(delta, dtype=np.float64)
        if d.shape != (len(users), self.x.shape[1]) or not np.isfinite(d).all():
            raise ValidationFailed(f"update of shape {d.shape} for {len(users)} users")
        self._check_rows(self.x[users] + d)
        self.x[users] += d
        self.bytes_in += d.size * 8


def sparse_rows(m: sp.csr_matrix) -> SparseRows:
    """SparseRows view of a scipy CSR matrix."""
    m = sp.csr_matrix(m)
    return SparseRows(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data.astype(np.float64), m.shape[1])


class PaillierEngine:
    """X as ciphertexts at the social party; products via the fast Paillier sandwich."""

    def __init__(self, ctx: paillier.PaillierContext, *, clip_norm: float, left_l1_bound: float,
                 noise_bound: float) -> None:
        self.ctx = ctx
        self.clip_norm, self.left_l1_bound, self.noise_bound = clip_norm, left_l1_bound, noise_bound
        self.enc: EncryptedMatrix | None = None
        self._chunks: dict[int, EncryptedMatrix] = {}
        self._shape = (0, 0)
        self.bytes_in = self.bytes_out = 0

    def start(self, n_rows: int, dim: int) -> None:
        """Forget the previous [X]; expect n_rows x dim ciphertexts."""
        self.enc, self._chunks, self._shape = None, {}, (n_rows, dim)

    def _check(self, m: Any, rows: int | None) -> EncryptedMatrix:
        if not isinstance(m, EncryptedMatrix):
            raise ProtocolError("expected an EncryptedMatrix")
        if m.public_key != self.ctx.public_key:
            raise CryptoError("ciphertexts under a different public key")
        if m.cols != self._shape[1] or (rows is not None and m.rows != rows):
            raise ProtocolError(f"encrypted matrix of shape {m.shape} does not fit")
        if m.exponent != fixed_point.exponent_for(FRAC_BITS):
            raise ProtocolError(f"exponent {m.exponent} != {-FRAC_BITS // 4}")
        m.validate()
        return m

    def put_rows(self, offset: int, chunk: Any) -> None:
        """Store a chunk of [X] (declared row-norm bound must be <= C)."""
        m = self._check(chunk, None)
        if m.bound > self.clip_norm * (1 + 1e-9):
            raise CryptoError(f"declared row bound {m.bound} exceeds the clipping norm {self.clip_norm}")
        if offset < 0 or offset + m.rows > self._shape[0] or offset in self._chunks:
            raise ProtocolError(f"chunk rows [{offset}, {offset + m.rows}) outside X or repeated")
        self._chunks[offset] = m
        self.bytes_in += len(m.data) * ciphertext_bytes(m.public_key)
        if self.complete():
            data = [c for k in sorted(self._chunks) for c in self._chunks[k].data]
            self.enc = EncryptedMatrix(m.public_key, self._shape[0], self._shape[1], m.exponent, data,
                                       self.clip_norm)

    def complete(self) -> bool:
        """Whether the chunks cover every row exactly once."""
        if self.enc is not None:
            return True
        pos = 0
        for k in sorted(self._chunks):
            if k != pos:
                return False
            pos += self._chunks[k].rows
        return pos == self._shape[0] and pos > 0

    def _product(self, left: sp.csr_matrix, enc: EncryptedMatrix, right: np.ndarray, noise: np.ndarray) -> PackedResult:
        z = np.clip(noise, -self.noise_bound, self.noise_bound)
        out = paillier.sandwich_product(self.ctx, sparse_rows(left), enc, right, z, pack=True,
                                        left_l1_bound=self.left_l1_bound, right_norm_bound=self.clip_norm,
                                        noise_bound=self.noise_bound)
        assert isinstance(out, PackedResult)
        self.bytes_out += len(out.data) * ciphertext_bytes(enc.public_key)
        return out

    def forward(self, left: sp.csr_matrix, right: np.ndarray, noise: np.ndarray) -> PackedResult:
        """[(B L) X W_P2 + Z], packed."""
        assert self.enc is not None
        return self._product(left, self.enc, right, noise)

    def backward(self, left: sp.csr_matrix, middle: Any, right: np.ndarray, noise: np.ndarray) -> PackedResult:
        """[(B L B^T) G W_P2^T + Z'], packed; [G] must declare row bound <= C."""
        g = self._check(middle, left.shape[0])
        if g.bound > self.clip_norm * (1 + 1e-9):
            raise CryptoError(f"declared gradient row bound {g.bound} exceeds {self.clip_norm}")
        self.bytes_in += len(g.data) * ciphertext_bytes(g.public_key)
        g = EncryptedMatrix(g.public_key, g.rows, g.cols, g.exponent, g.data, self.clip_norm)
        return self._product(left, g, right, noise)

    def add_rows(self, users: np.ndarray, delta: Any) -> None:
        """[X_users] += [delta]; the rating party promises the new rows stay within C."""
        assert self.enc is not None
        d = self._check(delta, len(users))
        self.bytes_in += len(d.data) * ciphertext_bytes(d.public_key)
        self.enc = paillier.homomorphic_update(self.enc, [int(u) for u in users], d, bound=self.clip_norm)

