"""Keys, the DJN context, and entry-wise encryption / decryption of matrices (fast path).

Keys are phe keys and every unpacked ciphertext emitted here is
``phe.EncryptedNumber(pk, c, exponent)``; packed sandwich results decrypt with `decrypt_result`.

Randomness (Damgard-Jurik-Nielsen). The key owner publishes h_s = h^n mod n^2 with
h = -x^2 mod n for a random unit x (computed with CRT, it knows p, q). A fresh n-th
residue is h_s^a with a uniform in [0, 2^ceil(k/2)) for a k-bit n, computed from a
fixed-base table (one mulmod per 8-bit window: ~128 instead of ~3,000 for r^n).
Security statement: ciphertexts stay semantically secure under DCR plus the DJN
short-exponent assumption that h_s^a with a of k/2 bits is indistinguishable from a
uniform n-th residue (Damgard-Jurik-Nielsen 2010, the variant used by SecretFlow HEU's
ZPaillier and Intel IPCL). phe keys are not necessarily Blum integers, so h generates a
large subgroup of the squares' negatives rather than all of J_n; the assumption is the
same one these libraries make. Without h_s (plain phe) use r^n at ~14x the cost.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, Self

import gmpy2
import numpy as np
import phe.util
from gmpy2 import mpz
from phe import PaillierPrivateKey, PaillierPublicKey, generate_paillier_keypair

from services.crypto.paillier import fixed_point
from services.crypto.paillier.kernels import Engine, FastCore, build_table
from services.crypto.paillier.matrix import EncryptedMatrix, PackedResult
from services.crypto.paillier.packing import unpack_signed
from services.errors import CryptoError, ProtocolError

Rng = Callable[[int], int]
"""Cryptographic randomness source: rng(k) returns k uniform random bits (secrets.randbits)."""


def require_gmp() -> None:
    """Raise CryptoError unless phe runs on gmpy2 (pure Python is ~8.5x slower)."""
    if not phe.util.HAVE_GMP:
        raise CryptoError("phe is running without gmpy2; install gmpy2")


def generate_keypair(n_length: int = 2048) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """phe key pair (2048-bit default; use 512-1024 only in tests)."""
    require_gmp()
    return generate_paillier_keypair(n_length=n_length)


def djn_hs(private_key: PaillierPrivateKey, *, rng: Rng = secrets.randbits) -> int:
    """Key owner: h_s = (-x^2)^n mod n^2 for a random unit x, computed with CRT mod p^2, q^2.

    Args:
        private_key: the phe private key (p, q).
        rng: cryptographic random bits.
    Returns:
        h_s, to publish next to n; it reveals nothing beyond n (a random n-th residue).
    """
    require_gmp()
    n = mpz(private_key.public_key.n)
    while True:
        x = mpz(rng(n.bit_length() + 64)) % n
        if x > 1 and gmpy2.gcd(x, n) == 1:
            break
    h = (-x * x) % n
    p2, q2 = mpz(private_key.psquare), mpz(private_key.qsquare)
    hp, hq = gmpy2.powmod(h, n, p2), gmpy2.powmod(h, n, q2)
    u = (hq - hp) * gmpy2.invert(p2, q2) % q2
    return int(hp + u * p2)


class PaillierContext:
    """FastPublicKey: a phe public key + published h_s + DJN table + worker processes.

    Build once per key (table: 0.2 s, 16.7 MB at 2048 bits); both parties can hold one.
    `workers` processes (default: all cores) are forked lazily; call `close()` when done.
    """

    def __init__(self, public_key: PaillierPublicKey, h_s: int, *, window: int = 8,
                 workers: int | None = None) -> None:
        require_gmp()
        n, n2 = mpz(public_key.n), mpz(public_key.nsquare)
        if not 1 < h_s < n2 or gmpy2.gcd(mpz(h_s), n) != 1:
            raise CryptoError("h_s is not a unit mod n^2")
        if not 1 <= window <= 12:
            raise CryptoError("table window must be 1..12 bits")
        self.public_key = public_key
        self.h_s = int(h_s)
        self.exp_bits = (n.bit_length() + 1) // 2
        core = FastCore(n, n2, window, self.exp_bits, build_table(h_s, n2, self.exp_bits, window))
        self.engine = Engine(core, workers if workers is not None else (os.cpu_count() or 1))

    @property
    def n(self) -> Any:
        return self.engine.core.n

    @property
    def n2(self) -> Any:
        return self.engine.core.n2

    def random_exponents(self, count: int, rng: Rng) -> list[int]:
        """DJN exponents a, uniform below 2^ceil(k/2)."""
        return [rng(self.exp_bits) for _ in range(count)]

    def close(self) -> None:
        """Stop the worker processes."""
        self.engine.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FastPublicKey = PaillierContext
"""Alias: the context is the 'fast public key' (phe key + h_s + table + workers)."""


def _public_bound(values: np.ndarray, bound: float | None) -> float:
    """Public bound on the l2 norm of every row (checked, or the next power of two)."""
    top = float(np.linalg.norm(values, axis=1).max()) if values.size else 0.0
    if bound is None:  # a power of two: reveals only the binary order of magnitude
        return float(2.0 ** np.ceil(np.log2(top))) if top > 0 else 1.0
    if top > bound:
        raise CryptoError(f"row l2 norm {top} exceeds the declared public bound {bound}")
    return float(bound)


def encrypt_matrix(ctx: PaillierContext, x: np.ndarray, *, frac_bits: int = 20,
                   rng: Rng = secrets.randbits, bound: float | None = None,
                   randomness: list | None = None) -> EncryptedMatrix:
    """Encrypt a real matrix entry-wise at scale 2^frac_bits with DJN randomness.

    Args:
        ctx: context of the receiver-visible public key (the owner's own key).
        x: rows x cols real matrix.
        frac_bits: fractional bits (multiple of 4); phe exponent = -frac_bits/4.
        rng: cryptographic random bits for the DJN exponents.
        bound: public bound on the l2 norm of each row (checked); default: the next power
            of two of the largest row norm. Sandwich products size their slots from it.
        randomness: optional precomputed n-th residues (consumed from the end).
    Returns:
        EncryptedMatrix whose entries decrypt with phe to round(x*2^f)/2^f.
    Math: c = (1 + m n) h_s^a mod n^2, m = round(x 2^f) mod n. Privacy: IND-CPA (DCR + DJN).
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ProtocolError(f"expected a 2-D matrix, got shape {arr.shape}")
    public_bound = _public_bound(arr, bound)
    n = int(ctx.n)
    residues = [int(v) % n for v in fixed_point.encode(arr, frac_bits).ravel()]
    if randomness is not None:
        if len(randomness) < len(residues):
            raise CryptoError("not enough precomputed randomness")
        factors = [randomness.pop() for _ in residues]
        n2 = ctx.n2
        data = [(m * ctx.n + 1) * r % n2 for m, r in zip(residues, factors)]
    else:
        exps = ctx.random_exponents(len(residues), rng)
        data = ctx.engine.map_flat("encrypt", [residues, exps])
    return EncryptedMatrix(ctx.public_key, arr.shape[0], arr.shape[1],
                           fixed_point.exponent_for(frac_bits), data, public_bound)


def precompute_randomness(ctx: PaillierContext, count: int, *,
                          rng: Rng = secrets.randbits) -> list:
    """Offline pool of fresh n-th residues h_s^a (each must be used exactly once)."""
    return ctx.engine.map_flat("random_factors", [ctx.random_exponents(count, rng)])


def rerandomize(ctx: PaillierContext, enc: EncryptedMatrix, *,
                rng: Rng = secrets.randbits) -> EncryptedMatrix:
    """Multiply every ciphertext by a fresh h_s^a: new ciphertexts, same plaintexts."""
    _same_key(ctx, enc.public_key)
    data = ctx.engine.map_flat("rerandomize", [enc.data, ctx.random_exponents(len(enc.data), rng)])
    return EncryptedMatrix(enc.public_key, enc.rows, enc.cols, enc.exponent, data, enc.bound)


def homomorphic_update(enc: EncryptedMatrix, rows: Sequence[int], enc_delta: EncryptedMatrix, *,
                       bound: float | None = None) -> EncryptedMatrix:
    """[X] with [X_rows] <- [X_rows] + [delta] (ciphertext products mod n^2); returns a new matrix.

    Args:
        enc: the stored encrypted matrix (N x d).
        rows: distinct row indices, one per row of enc_delta.
        enc_delta: encrypted update (len(rows) x d) at the same exponent, fresh from its owner.
        bound: new public row-norm bound (default: enc.bound + enc_delta.bound, triangle
            inequality); pass the owner's clipping norm when it re-clips its rows.
    """
    if enc_delta.public_key != enc.public_key:
        raise CryptoError("update encrypted under a different key")
    if enc_delta.cols != enc.cols or enc_delta.rows != len(rows) or len(set(rows)) != len(rows):
        raise ProtocolError(f"update shape {enc_delta.shape} does not fit {len(rows)} rows x {enc.cols}")
    if enc_delta.exponent != enc.exponent:
        raise ProtocolError(f"update exponent {enc_delta.exponent} != {enc.exponent}")
    if any(not 0 <= int(r) < enc.rows for r in rows):
        raise ProtocolError("update row index out of range")
    n2, d = mpz(enc.public_key.nsquare), enc.cols
    data = list(enc.data)
    for i, r in enumerate(rows):
        base = int(r) * d
        for k, c in enumerate(enc_delta.row(i)):
            data[base + k] = data[base + k] * c % n2
    new_bound = enc.bound + enc_delta.bound if bound is None else float(bound)
    return EncryptedMatrix(enc.public_key, enc.rows, d, enc.exponent, data, new_bound)


def raw_decrypt_many(private_key: PaillierPrivateKey, cts: Sequence[Any], *,
                     threads: int = 2) -> list[int]:
    """CRT decryption of raw ciphertexts; the two half-exponentiations run in GIL-free threads."""
    p, q = mpz(private_key.p), mpz(private_key.q)
    p2, q2 = mpz(private_key.psquare), mpz(private_key.qsquare)
    hp, hq, p_inv = mpz(private_key.hp), mpz(private_key.hq), mpz(private_key.p_inverse)
    cts = [mpz(c) for c in cts]
    parts: dict[int, tuple[list, list]] = {}
    step = max(1, -(-len(cts) // max(1, threads)))

    def work(i: int) -> None:
        chunk = cts[i:i + step]
        parts[i] = (gmpy2.powmod_base_list(chunk, p - 1, p2), gmpy2.powmod_base_list(chunk, q - 1, q2))

    pool = [threading.Thread(target=work, args=(i,)) for i in range(0, len(cts), step)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out = []
    for i in sorted(parts):
        for xp, xq in zip(*parts[i]):
            mp = (xp - 1) // p * hp % p
            mq = (xq - 1) // q * hq % q
            out.append(int(mp + (mq - mp) * p_inv % q * p))
    return out


def decrypt_matrix(private_key: PaillierPrivateKey, enc: EncryptedMatrix) -> np.ndarray:
    """Decrypt an unpacked matrix to float64 (same values phe's decrypt returns)."""
    if enc.public_key != private_key.public_key:
        raise CryptoError("matrix encrypted under a different key")
    enc.validate()
    n = int(enc.public_key.n)
    values = [fixed_point.centred(m, n) for m in raw_decrypt_many(private_key, enc.data)]
    return fixed_point.decode(values, fixed_point.frac_bits_for(enc.exponent)).reshape(enc.shape)


def decrypt_result(private_key: PaillierPrivateKey, result: PackedResult | EncryptedMatrix) -> np.ndarray:
    """Decrypt a sandwich result (packed or not) to a rows x cols float64 array.

    Packed: CRT-decrypt each ciphertext, centred lift mod n, peel signed W-bit slots;
    raises CryptoError if content lies beyond the slots (a violated bound).
    """
    if isinstance(result, EncryptedMatrix):
        return decrypt_matrix(private_key, result)
    if result.public_key != private_key.public_key:
        raise CryptoError("result encrypted under a different key")
    result.as_matrix().validate()
    n, spec, s = int(result.public_key.n), result.spec, result.spec.slots
    plain = raw_decrypt_many(private_key, result.data)
    out = np.zeros((result.rows, result.cols))
    frac = fixed_point.frac_bits_for(result.exponent)
    for b in range(result.blocks):
        count = min(s, result.rows - b * s)
        for col in range(result.cols):
            slots = unpack_signed(plain[b * result.cols + col], spec, n, count)
            out[b * s:b * s + count, col] = fixed_point.decode(slots, frac)
    return out


def _same_key(ctx: PaillierContext, public_key: PaillierPublicKey) -> None:
    if public_key != ctx.public_key:
        raise CryptoError("ciphertexts under a different public key than the context")

