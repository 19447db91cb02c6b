"""The sandwich product J' = L [M] N + Z on raw ciphertexts (P4GCN, SPEC §3).

Run by the party that does NOT hold the key (B): L (sparse rows) and N are its private
plaintext matrices, Z its DP noise, [M] the key owner's encrypted matrix.

Math, fixed point: L*2^fl, N*2^fn and M*2^fm are integers, so J*2^(fl+fn+fm) is the
integer L_int M_int N_int; with all f multiples of 4 the phe exponent of J is the sum of
the three exponents. Order (L[M])N: nnz(L)*d weight terms plus d^2 per output row.
 1. Packing (pack=True): rows are grouped in blocks of S; for each block and column k
    P_k = prod_s T_sk^(2^(W s)) by Horner, with the bits of L interleaved into the
    squarings (T_sk = prod_j [M_jk]^(L_sj) never materialises).
 2. Right product on the packed P_k: bucket multi-exponentiation with exponents
    N + off >= 0 and one correction (prod_k P_k)^(-off) per block (sign-offset trick).
 3. Plaintext noise at the result's scale (1 + n*z) and one fresh h_s^a per output.
Slot width W comes from PUBLIC bounds (row l2 of M <= enc.bound, row l1 of L, column l2
of N, |Z|) and every plaintext input is checked against them, so no slot can overflow.
Privacy: B sees only ciphertexts; A sees J + Z per slot; every output is re-randomised
(without it A, knowing its own randomness, could solve for B's small exponents).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable

import gmpy2
import numpy as np

from services.crypto.paillier import fixed_point
from services.crypto.paillier.context import PaillierContext
from services.crypto.paillier.matrix import EncryptedMatrix, PackedResult, SparseRows
from services.crypto.paillier.packing import PackingSpec, check_spec, pack_plain, spec_for
from services.errors import CryptoError, ProtocolError


def right_plan(n_int: np.ndarray) -> tuple[list, int, int, int]:
    """Bucket plan of the multi-exponentiation by N + off (shared by all blocks)."""
    off = max(0, -int(n_int.min())) if n_int.size else 0
    e = n_int.astype(object) + off
    top = max(1, int(max(e.ravel(), default=1)).bit_length())
    d_in, d_out = n_int.shape
    window = min(range(1, 9), key=lambda c: d_in * -(-top // c) + (2 << c))
    n_windows = -(-top // window)
    mask = (1 << window) - 1
    plan = []
    for col in range(d_out):
        buckets: list[list[tuple[int, int]]] = [[] for _ in range(mask)]
        for k in range(d_in):
            v = int(e[k, col])
            for j in range(n_windows):
                digit = (v >> (window * j)) & mask
                if digit:
                    buckets[digit - 1].append((k, j))
        plan.append(buckets)
    return plan, window, n_windows, off


def _int_bound(value: float | None, real: float, actual: int, frac_bits: int, slack: float,
               what: str) -> int:
    """Integer bound at scale 2^frac_bits: the actual one, or the declared public one.

    A declared bound is checked on the real values; its integer form adds the public
    rounding slack of the encoding, so the encoded values provably respect it too.
    """
    if value is None:
        return actual
    if real > value * (1 + 1e-12):  # float noise of the caller's clipping
        raise CryptoError(f"{what} = {real} exceeds its public bound {value}")
    return math.ceil(float(value) * 2.0**frac_bits + slack)


def result_bound(enc: EncryptedMatrix, left: SparseRows, l_int: np.ndarray, right: np.ndarray,
                 n_int: np.ndarray, noise: np.ndarray, z_int: np.ndarray, *, left_frac_bits: int,
                 right_frac_bits: int, left_l1_bound: float | None,
                 right_norm_bound: float | None, noise_bound: float | None) -> int:
    """Integer bound on |J + Z| at the result scale (Cauchy-Schwarz), from public bounds.

    |sum_j L_ij (X_j . N_l)| <= ||L_i||_1 * max_j ||X_j||_2 * ||N_l||_2 on the encoded
    integers: rounding adds at most n_cols/2 to an l1 norm and sqrt(d)/2 to an l2 norm.
    """
    fm = fixed_point.frac_bits_for(enc.exponent)
    frac = fm + left_frac_bits + right_frac_bits
    ptr = np.asarray(left.indptr)
    l1_int = [int(np.abs(l_int[ptr[i]:ptr[i + 1]]).sum()) for i in range(left.n_rows)]
    l1_real = [float(np.abs(left.row(i)[1]).sum()) for i in range(left.n_rows)]
    l1 = _int_bound(left_l1_bound, max(l1_real, default=0.0), max(l1_int, default=0),
                    left_frac_bits, left.n_cols / 2, "row l1 norm of L")
    col_sq = (n_int.astype(object) ** 2).sum(axis=0) if n_int.size else [0]
    n2 = _int_bound(right_norm_bound, float(np.linalg.norm(right, axis=0).max(initial=0.0)),
                    max(int(gmpy2.isqrt(int(v))) + 1 for v in col_sq), right_frac_bits,
                    math.sqrt(right.shape[0]) / 2, "column l2 norm of N")
    x2 = math.ceil(enc.bound * 2.0**fm + math.sqrt(enc.cols) / 2)
    z = _int_bound(noise_bound, float(np.abs(noise).max(initial=0.0)),
                   int(np.abs(z_int).max(initial=0)), frac, 0.5, "max |noise|")
    # the slot must also hold every left weight: their bits share the W-bit shifts
    return max(l1 * x2 * n2 + z, int(np.abs(l_int).max(initial=0)))


def sandwich_product(ctx: PaillierContext, left: SparseRows, enc: EncryptedMatrix,
                     right: np.ndarray, noise: np.ndarray, *, pack: bool = True,
                     rng: Callable[[int], int] = secrets.randbits, left_frac_bits: int = 16,
                     right_frac_bits: int = 16, left_l1_bound: float | None = None,
                     right_norm_bound: float | None = None, noise_bound: float | None = None,
                     slot_bits: int | None = None) -> PackedResult | EncryptedMatrix:
    """[L M N + Z] with one fresh n-th residue per returned ciphertext.

    Args:
        ctx: PaillierContext of the key owner's public key (with its h_s).
        left: B x N_rows sparse L (e.g. the batch rows of L_sym, or B L_sym B^T).
        enc: [M], N_rows x d, with its public bound on the l2 norm of its rows.
        right: d x d_out plaintext N (e.g. W_P2 or W_P2^T).
        noise: B x d_out DP noise Z (drawn by the caller with its own np.random.Generator).
        pack: pack S rows per ciphertext (default) or return B x d_out phe-compatible cts.
        rng: cryptographic random bits for the re-randomisation exponents.
        left_frac_bits, right_frac_bits: fixed-point bits of L and N (multiples of 4).
        left_l1_bound, right_norm_bound, noise_bound: PUBLIC bounds on the max row l1 norm
            of L, the max column l2 norm of N and max |Z| (real units), checked on the
            inputs (CryptoError if exceeded). Default: the actual encoded values, which
            then leak (rounded to a bit length) through the slot width.
        slot_bits: force W (must cover the bound, else CryptoError).
    Returns:
        PackedResult (decode with `context.decrypt_result`) or EncryptedMatrix at exponent
        enc.exponent - (left_frac_bits + right_frac_bits)/4.
    """
    if enc.public_key != ctx.public_key:
        raise CryptoError("ciphertexts under a different public key than the context")
    right = np.asarray(right, dtype=np.float64)
    noise = np.asarray(noise, dtype=np.float64)
    if left.n_cols != enc.rows or right.ndim != 2 or right.shape[0] != enc.cols:
        raise ProtocolError(f"shapes L {left.n_rows}x{left.n_cols}, [M] {enc.shape}, N {right.shape}")
    if noise.shape != (left.n_rows, right.shape[1]):
        raise ProtocolError(f"noise shape {noise.shape} != {(left.n_rows, right.shape[1])}")
    frac = fixed_point.frac_bits_for(enc.exponent) + left_frac_bits + right_frac_bits
    l_int = fixed_point.encode(np.asarray(left.values), left_frac_bits)
    n_int = fixed_point.encode(right, right_frac_bits)
    z_int = fixed_point.encode(noise, frac)
    total = result_bound(enc, left, l_int, right, n_int, noise, z_int,
                         left_frac_bits=left_frac_bits, right_frac_bits=right_frac_bits,
                         left_l1_bound=left_l1_bound, right_norm_bound=right_norm_bound,
                         noise_bound=noise_bound)
    spec = _layout(int(ctx.n), total, left.n_rows, pack, slot_bits)
    exponent = enc.exponent + fixed_point.exponent_for(left_frac_bits) + \
        fixed_point.exponent_for(right_frac_bits)
    flat = _run(ctx, left, l_int, enc, n_int, z_int, spec, rng)
    if pack:
        return PackedResult(enc.public_key, left.n_rows, right.shape[1], exponent, spec, flat)
    return EncryptedMatrix(enc.public_key, left.n_rows, right.shape[1], exponent, flat,
                           total / 2.0**frac)


def _layout(n: int, total: int, rows: int, pack: bool, slot_bits: int | None) -> PackingSpec:
    """Slot layout that provably holds every |result| <= total."""
    if not pack:
        if total >= n // 3:  # phe's max_int: larger values would decode with the wrong sign
            raise CryptoError("result bound exceeds phe's encodable range")
        return PackingSpec(max(2, total.bit_length() + 1), 1)
    spec = spec_for(n, total, max_slots=max(1, rows))
    if slot_bits is not None:
        if slot_bits < spec.slot_bits:
            raise CryptoError(f"slot_bits={slot_bits} < {spec.slot_bits} needed by the bounds")
        spec = PackingSpec(slot_bits, max(1, min((n.bit_length() - 2) // slot_bits, rows)))
        check_spec(n, spec)
    return spec


def _run(ctx: PaillierContext, left: SparseRows, l_int: np.ndarray, enc: EncryptedMatrix,
         n_int: np.ndarray, z_int: np.ndarray, spec: PackingSpec,
         rng: Callable[[int], int]) -> list:
    """Schedule left packing (per block x column chunk) then right products (per block).

    Tasks are queued without barriers: a block's right product is submitted as soon as
    its packed columns are back, while the workers keep packing the other blocks.
    """
    s, d, n = spec.slots, enc.cols, int(ctx.n)
    engine = ctx.engine
    blocks = [(b, min(b + s, left.n_rows)) for b in range(0, left.n_rows, s)]
    if not blocks:
        return []
    chunks = max(1, min(d, -(-8 * engine.workers // len(blocks)))) if engine.workers > 1 else 1
    step = max(1, -(-d // chunks))
    pending = []
    for lo, hi in blocks:
        local: dict[int, int] = {}
        slot_terms = []
        for i in range(lo, hi):
            a, b = int(left.indptr[i]), int(left.indptr[i + 1])
            slot_terms.append([(local.setdefault(int(j), len(local)), int(e))
                               for j, e in zip(left.indices[a:b], l_int[a:b]) if e != 0])
        rows = [enc.row(j) for j in local]
        pending.append([engine.submit("pack_rows", (slot_terms, [r[c:c + step] for r in rows],
                                                    spec.slot_bits)) for c in range(0, d, step)])
    plan, window, n_windows, off = right_plan(n_int)
    outs = []
    for (lo, hi), getters in zip(blocks, pending):
        packed = [c for g in getters for c in g()]
        noise = [pack_plain([int(v) for v in z_int[lo:hi, col]], spec, n)
                 for col in range(n_int.shape[1])]
        exps = [rng(ctx.exp_bits) for _ in range(n_int.shape[1])]
        outs.append(engine.submit("right_multiply", ([packed], plan, window, n_windows, off,
                                                     [noise], [exps])))
    return [c for g in outs for c in g()[0]]
