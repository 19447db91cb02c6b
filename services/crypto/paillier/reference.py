"""Plain python-paillier (phe floats) reference of the sandwich product.

What a direct implementation does: phe EncryptedNumbers, float scalars (53-bit mantissa
exponents, exponent alignment on every add), one phe obfuscation (r^n) per output.
Used for correctness tests and as the benchmark baseline; far too slow for production.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from phe import EncryptedNumber

from services.crypto.paillier.matrix import SparseRows


def phe_left_row(left: SparseRows, enc: Sequence[Sequence[EncryptedNumber]], i: int, *,
                 dense: bool = False) -> list[EncryptedNumber]:
    """Row i of L [M] with phe floats (dense: also multiplies by the zeros of L)."""
    cols, vals = left.row(i)
    if dense:
        full = np.zeros(left.n_cols)
        full[cols] = vals
        cols, vals = np.arange(left.n_cols), full
    d = len(enc[0])
    out: list[EncryptedNumber] = []
    for k in range(d):
        acc = None
        for j, v in zip(cols, vals):
            term = enc[int(j)][k] * float(v)
            acc = term if acc is None else acc + term
        out.append(acc if acc is not None else enc[0][k] * 0.0)
    return out


def phe_right_entry(t_row: Sequence[EncryptedNumber], right: np.ndarray, col: int,
                    noise: float) -> EncryptedNumber:
    """(T N)[col] + noise with phe floats, then phe's obfuscation (one r^n)."""
    acc = None
    for k, t in enumerate(t_row):
        term = t * float(right[k, col])
        acc = term if acc is None else acc + term
    assert acc is not None
    acc = acc + float(noise)
    acc.obfuscate()
    return acc


def phe_sandwich_reference(left: SparseRows, enc: Sequence[Sequence[EncryptedNumber]],
                           right: np.ndarray, noise: np.ndarray, *,
                           rows: Sequence[int] | None = None, cols: Sequence[int] | None = None,
                           dense: bool = False) -> list[list[EncryptedNumber]]:
    """[L M N + Z] for the selected rows x cols of the output, with plain phe floats.

    Args:
        left: sparse L (B x N_rows); enc: [M] as phe EncryptedNumbers (N_rows x d).
        right: d x d_out N; noise: B x d_out Z.
        rows, cols: output sample (default: all).
        dense: multiply by every entry of L, zeros included (the textbook matmul).
    Returns:
        len(rows) x len(cols) obfuscated EncryptedNumbers (decrypt with phe).
    """
    right = np.asarray(right, dtype=np.float64)
    rows = range(left.n_rows) if rows is None else rows
    cols = range(right.shape[1]) if cols is None else cols
    out = []
    for i in rows:
        t_row = phe_left_row(left, enc, int(i), dense=dense)
        out.append([phe_right_entry(t_row, right, int(c), float(noise[int(i), int(c)])) for c in cols])
    return out
