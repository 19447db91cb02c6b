"""Encrypted path of the social products: [X] held as Paillier ciphertexts under the rating party's key.

Social party side (`PaillierEngine`): stores [X] (row chunks, range-checked), computes
[(B L) X W_P2 + Z] and [(B L B^T) G W_P2^T + Z'] with `paillier.sandwich_product` (packed,
re-randomised outputs) and applies [X_B] <- [X_B] + [dX_B] with `homomorphic_update`.
Rating party side (`PaillierSession`): key pair + DJN context, encrypts X / G / dX, decrypts results;
its private key file (`save_private_key`, `load_private_key`: crypto does no file I/O).
Privacy: the social party sees only ciphertexts (IND-CPA under DCR + the DJN short-exponent
assumption); the rating party sees J + Z only. Public bounds (row norm C of [X] and G, max row
l1 of L_sym, spectral norm C of W_P2, |Z| <= noise_bound) size the slots, so the slot width
reveals nothing data-dependent; noise is truncated at noise_bound (>= 12 sigma: negligible mass).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from phe import PaillierPrivateKey, PaillierPublicKey

from services.crypto import paillier
from services.crypto.paillier import EncryptedMatrix, PackedResult, SparseRows, fixed_point
from services.errors import CryptoError, ProtocolError

FRAC_BITS = 20


def check_key(public_key: PaillierPublicKey, min_bits: int) -> None:
    """Refuse keys shorter than min_bits (2048 outside tests/dev)."""
    bits = public_key.n.bit_length()
    if bits < min_bits:
        raise CryptoError(f"Paillier modulus of {bits} bits is below the required {min_bits}")


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
        self.bytes_in += len(m.data) * _ct_bytes(m)
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
        self.bytes_out += len(out.data) * _ct_bytes(enc)
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
        self.bytes_in += len(g.data) * _ct_bytes(g)
        g = EncryptedMatrix(g.public_key, g.rows, g.cols, g.exponent, g.data, self.clip_norm)
        return self._product(left, g, right, noise)

    def add_rows(self, users: np.ndarray, delta: Any) -> None:
        """[X_users] += [delta]; the rating party promises the new rows stay within C."""
        assert self.enc is not None
        d = self._check(delta, len(users))
        self.bytes_in += len(d.data) * _ct_bytes(d)
        self.enc = paillier.homomorphic_update(self.enc, [int(u) for u in users], d, bound=self.clip_norm)


def _ct_bytes(m: EncryptedMatrix) -> int:
    return (m.public_key.nsquare.bit_length() + 7) // 8


class PaillierSession:
    """The rating party's key material for the social products."""

    def __init__(self, public_key: PaillierPublicKey, private_key: PaillierPrivateKey, *, workers: int = 1) -> None:
        self.public_key, self.private_key = public_key, private_key
        self.h_s = paillier.djn_hs(private_key)
        self.ctx = paillier.PaillierContext(public_key, self.h_s, workers=workers)

    @classmethod
    def generate(cls, key_bits: int = 2048, *, workers: int = 1) -> PaillierSession:
        """Fresh key pair (small keys only in tests)."""
        pk, sk = paillier.generate_keypair(key_bits)
        return cls(pk, sk, workers=workers)

    def encrypt(self, x: np.ndarray, bound: float) -> EncryptedMatrix:
        """[x] at the protocol's fixed point, declaring the public row-norm bound (rows re-clipped to it)."""
        from services.crypto.dp import clip_rows

        safe = clip_rows(np.asarray(x, dtype=np.float64), bound * (1.0 - 1e-12))
        return paillier.encrypt_matrix(self.ctx, safe, frac_bits=FRAC_BITS, bound=bound)

    def decrypt(self, result: PackedResult | EncryptedMatrix) -> np.ndarray:
        """Decrypt a (packed) product."""
        return paillier.decrypt_result(self.private_key, result)

    def close(self) -> None:
        """Stop the context's worker processes."""
        self.ctx.close()


def save_private_key(private_key: PaillierPrivateKey, path: str | Path, *,
                     h_s: int | None = None) -> None:
    """Write p, q (and h_s) as JSON to a new file created with 0600 permissions."""
    data = {"p": str(private_key.p), "q": str(private_key.q)}
    if h_s is not None:
        data["h_s"] = str(h_s)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(data).encode())
    finally:
        os.close(fd)


def load_private_key(path: str | Path) -> tuple[PaillierPrivateKey, int | None]:
    """Read a key file written by `save_private_key`; refuses group/world-readable files."""
    if os.stat(path).st_mode & 0o077:
        raise CryptoError(f"private key file {path} is readable by others (need 0600)")
    data = json.loads(Path(path).read_text())
    p, q = int(data["p"]), int(data["q"])
    public_key = PaillierPublicKey(p * q)
    h_s = int(data["h_s"]) if "h_s" in data else None
    return PaillierPrivateKey(public_key, p, q), h_s


def paillier_social_party(*, config: Any, adjacency: sp.spmatrix, public_key: PaillierPublicKey, h_s: int,
                          rng: np.random.Generator, workers: int = 1) -> Any:
    """A SocialParty whose engine holds [X] under the rating party's key (checked to be >= min_key_bits)."""
    from services.party.social import SocialParty
    from services.party.social_graph import normalized_laplacian

    check_key(public_key, config.min_key_bits)
    ctx = paillier.PaillierContext(public_key, h_s, workers=workers)
    lap = normalized_laplacian(sp.csr_matrix(adjacency), scale=config.laplacian_scale)
    l1 = float(np.abs(lap).sum(axis=1).max()) if lap.shape[0] else 1.0
    left_bound = float(2.0 ** np.ceil(np.log2(max(l1, 1e-12))))  # public: a power of two
    engine = PaillierEngine(ctx, clip_norm=config.clip_norm, left_l1_bound=left_bound, noise_bound=1.0)
    party = SocialParty(config=config, adjacency=adjacency, engine=engine, rng=rng)
    engine.noise_bound = 12.0 * party.sigma if party.sigma > 0 else 2.0**-8
    return party


class InProcessPaillierBackend:
    """Rating-party backend over the encrypted path, in-process; every message goes through its bytes."""

    def __init__(self, party: Any, session: PaillierSession, *, clip_norm: float, chunk_rows: int = 256) -> None:
        self.party, self.session, self.clip_norm, self.chunk_rows = party, session, clip_norm, chunk_rows
        self.bytes_up = self.bytes_down = 0

    def _send(self, m: EncryptedMatrix) -> EncryptedMatrix:
        blob = m.to_bytes()
        self.bytes_up += len(blob)
        return EncryptedMatrix.from_bytes(self.session.public_key, blob)

    def _receive(self, r: PackedResult) -> np.ndarray:
        blob = r.to_bytes()
        self.bytes_down += len(blob)
        return self.session.decrypt(PackedResult.from_bytes(self.session.public_key, blob))

    def begin_epoch(self, x: np.ndarray) -> None:
        """Encrypt X once and upload it in row chunks."""
        self.party.begin_epoch()
        enc = self.session.encrypt(x, self.clip_norm)
        for start in range(0, x.shape[0], self.chunk_rows):
            stop = min(start + self.chunk_rows, x.shape[0])
            self.party.upload_x(start, self._send(enc.take_rows(range(start, stop))))

    def forward(self, users: np.ndarray) -> np.ndarray:
        """Decrypted noisy forward product."""
        return self._receive(self.party.forward(users))

    def backward(self, users: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Encrypt G, get the decrypted noisy backward product."""
        return self._receive(self.party.backward(users, self._send(self.session.encrypt(grad, self.clip_norm))))

    def update_rows(self, users: np.ndarray, delta: np.ndarray) -> None:
        """Encrypt the row deltas and let the social party add them homomorphically."""
        self.party.update_x(users, self._send(self.session.encrypt(delta, 2.0 * self.clip_norm)))

    def privacy(self) -> dict[str, Any]:
        """The social party's privacy record."""
        return dict(self.party.privacy_record())

    def traffic(self) -> dict[str, int]:
        """Serialised bytes sent to / received from the social party."""
        return {"bytes_to_social": self.bytes_up, "bytes_from_social": self.bytes_down}
