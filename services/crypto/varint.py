"""Vectorised unsigned LEB128 varints (values < 2**63), used by compact wire encodings."""

from __future__ import annotations

import numpy as np

from services.errors import ProtocolError

_MAX_BYTES = 9  # 9 × 7 = 63 bits


def uvarint_sizes(values: np.ndarray) -> np.ndarray:
    """Encoded length in bytes of each value."""
    v = np.asarray(values, dtype=np.uint64)
    sizes = np.ones(v.shape, dtype=np.int64)
    for k in range(1, _MAX_BYTES):
        sizes += v >= np.uint64(1 << (7 * k))
    return sizes


def encode_uvarints(values: np.ndarray) -> bytes:
    """Concatenated LEB128 encodings of non-negative integers below 2**63."""
    v = np.asarray(values, dtype=np.uint64).ravel()
    if v.size and v.max() >= np.uint64(1 << 63):
        raise ValueError("varint values must be below 2**63")
    sizes = uvarint_sizes(v)
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    starts = np.cumsum(sizes) - sizes
    for k in range(int(sizes.max()) if v.size else 0):
        sel = sizes > k
        byte = (v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (sizes[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[sel] + k] = (byte | more).astype(np.uint8)
    return out.tobytes()


def decode_uvarints(buf: np.ndarray, pos: int, count: int) -> tuple[np.ndarray, int]:
    """Read ``count`` canonical varints from ``buf[pos:]``; return (uint64 values, end pos).

    Raises ProtocolError on truncation, overlong or non-canonical encodings.
    """
    if count == 0:
        return np.zeros(0, dtype=np.uint64), pos
    window = buf[pos:pos + _MAX_BYTES * count]
    ends = np.flatnonzero(window < 0x80)[:count]
    if len(ends) < count:
        raise ProtocolError("truncated varint")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > _MAX_BYTES or np.any((window[ends] == 0) & (lengths > 1)):
        raise ProtocolError("overlong or non-canonical varint")
    used = window[:ends[-1] + 1].astype(np.uint64)
    offset = np.arange(len(used)) - np.repeat(starts, lengths)
    parts = (used & np.uint64(0x7F)) << (offset.astype(np.uint64) * np.uint64(7))
    values = np.bitwise_or.reduceat(parts, starts)
    return values.astype(np.uint64), pos + int(ends[-1]) + 1
