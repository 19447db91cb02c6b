"""Key handling of P4GCN: the rating party's key pair and context, the key-size policy, key files.

The rating party owns the Paillier key: it encrypts X, G and dX at the protocol's fixed point and
decrypts the packed products. The social party only checks that a received public key is long
enough. Key files live here, not in services.crypto (crypto does no I/O).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from phe import PaillierPrivateKey, PaillierPublicKey

from services.crypto import paillier
from services.crypto.dp import clip_rows
from services.crypto.paillier import EncryptedMatrix, PackedResult
from services.errors import CryptoError
from services.protocol.social import FRAC_BITS


def check_key(public_key: PaillierPublicKey, min_bits: int) -> None:
    """Refuse keys shorter than min_bits (2048 outside tests/dev)."""
    bits = public_key.n.bit_length()
    if bits < min_bits:
        raise CryptoError(f"Paillier modulus of {bits} bits is below the required {min_bits}")


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
