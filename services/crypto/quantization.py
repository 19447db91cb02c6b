"""Ternary quantization of public-parameter gradients (VerFedGNN Definition 4.2).

Q(x)_i = r · sign(x_i) · b_i,  b_i ~ Bernoulli(|x_i| / r),  r ≥ ||x||_∞.

E[Q(x)] = x (unbiased), Var[Q(x)_i] = r|x_i| − x_i².  Each element takes one of three values
{−r, 0, r}, so an upload is the sorted flat indices of the non-zeros plus one sign bit each;
expected non-zeros = ||x||₁ / r.

Privacy assumption (VerFedGNN Theorem 4.2): after clipping each gradient element to
[−0.5, 0.5] (so neighbouring inputs differ by at most 1 in every coordinate), the mechanism
is (0, 1/r)-differentially private for one party's gradient in one round.  The guarantee
is per round; nothing here composes it across rounds.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from services.crypto.varint import decode_uvarints, encode_uvarints, uvarint_sizes
from services.errors import ProtocolError

_MAGIC = b"TQ\x01"
_MAX_NDIM = 8


def clip(x: np.ndarray, bound: float = 0.5) -> np.ndarray:
    """Element-wise clip to [−bound, bound] (bounds the sensitivity of each coordinate)."""
    if not bound > 0 or not math.isfinite(bound):
        raise ValueError("bound must be positive and finite")
    return np.asarray(np.clip(x, -bound, bound))


@dataclass(frozen=True)
class TernaryUpload:
    """The non-zero entries of Q(x): value at flat index ``indices[k]`` is ``r·signs[k]``."""

    shape: tuple[int, ...]
    r: float
    indices: np.ndarray = field(repr=False)  # int64, sorted, unique
    signs: np.ndarray = field(repr=False)  # int8, ±1

    def __post_init__(self) -> None:
        idx, sg = np.asarray(self.indices), np.asarray(self.signs)
        if idx.ndim != 1 or sg.shape != idx.shape:
            raise ValueError("indices and signs must be 1-D arrays of equal length")
        if idx.size and (idx[0] < 0 or idx[-1] >= self.size or np.any(np.diff(idx) <= 0)):
            raise ValueError("indices must be sorted, unique and inside the tensor")
        if not np.all(np.abs(sg) == 1):
            raise ValueError("signs must be ±1")
        if not (self.r > 0 and math.isfinite(self.r)):
            raise ValueError("r must be positive and finite")

    @property
    def size(self) -> int:
        """Number of elements of the dense tensor."""
        return math.prod(self.shape)

    def nbytes(self) -> int:
        """Bytes of :func:`encode_ternary` (delta-varint indices, one bit per sign)."""
        gaps = _gaps(self.indices)
        header = len(_MAGIC) + 1 + int(uvarint_sizes(np.asarray(self.shape, np.uint64)).sum())
        stream = int(uvarint_sizes(gaps).sum())
        counts = uvarint_sizes(np.asarray([len(self.indices), stream], np.uint64)).sum()
        return header + 8 + int(counts) + stream + (len(self.signs) + 7) // 8


def ternary_quantize(x: np.ndarray, *, r: float, rng: np.random.Generator) -> TernaryUpload:
    """Stochastic ternary quantization Q(x) of one tensor.

    Args:
        x: real array; must satisfy ||x||_∞ ≤ r and be finite (clip first).
        r: quantization level, r > 0; the privacy parameter (δ = 1/r per round).
        rng: source of the Bernoulli draws.

    Returns:
        The sparse upload; ``ternary_dequantize`` gives an unbiased estimate of x.
    """
    if not r > 0 or not math.isfinite(r):
        raise ValueError("r must be positive and finite")
    flat = np.asarray(x, dtype=np.float64).ravel()
    if not np.all(np.isfinite(flat)):
        raise ValueError("x contains non-finite values")
    if flat.size and np.abs(flat).max() > r:
        raise ValueError(f"r={r} is below ||x||_inf={np.abs(flat).max()}; clip x first")
    keep = rng.random(flat.size) < np.abs(flat) / r
    indices = np.flatnonzero(keep).astype(np.int64)
    signs = np.sign(flat[indices]).astype(np.int8)
    return TernaryUpload(shape=tuple(int(s) for s in np.shape(x)), r=float(r),
                         indices=indices, signs=signs)


def ternary_dequantize(upload: TernaryUpload) -> np.ndarray:
    """Dense float32 tensor of ``upload.shape`` holding r·sign at the kept indices."""
    out = np.zeros(upload.size, dtype=np.float32)
    out[upload.indices] = np.float32(upload.r) * upload.signs.astype(np.float32)
    return out.reshape(upload.shape)


def quantize_gradients(
    grads: dict[str, np.ndarray],
    *,
    clip_bound: float = 0.5,
    r: float = 3.0,
    rng: np.random.Generator,
) -> dict[str, TernaryUpload]:
    """Clip each gradient to [−clip_bound, clip_bound], then ternary-quantize it.

    Tensors are processed in sorted-name order so a seeded rng gives reproducible uploads.
    """
    if r < clip_bound:
        raise ValueError("r must be at least clip_bound")
    return {name: ternary_quantize(clip(grads[name], clip_bound), r=r, rng=rng)
            for name in sorted(grads)}


def dequantize_gradients(uploads: dict[str, TernaryUpload]) -> dict[str, np.ndarray]:
    """Dense float32 gradient per name."""
    return {name: ternary_dequantize(u) for name, u in uploads.items()}


def _gaps(indices: np.ndarray) -> np.ndarray:
    """Sorted unique indices → non-negative gaps (index_k − index_{k−1} − 1)."""
    idx = np.asarray(indices, dtype=np.int64)
    return (np.diff(idx, prepend=np.int64(-1)) - 1).astype(np.uint64)


def encode_ternary(upload: TernaryUpload) -> bytes:
    """Wire bytes: magic, ndim, dims, r (f64), count, stream length, gap varints, sign bits."""
    gaps = encode_uvarints(_gaps(upload.indices))
    head = [_MAGIC, bytes([len(upload.shape)]),
            encode_uvarints(np.asarray(upload.shape, dtype=np.uint64)),
            struct.pack("<d", upload.r),
            encode_uvarints(np.asarray([len(upload.indices), len(gaps)], dtype=np.uint64))]
    return b"".join(head) + gaps + np.packbits(upload.signs > 0).tobytes()


def decode_ternary(data: bytes, *, max_size: int | None = None) -> TernaryUpload:
    """Parse and validate :func:`encode_ternary` bytes; any defect raises ProtocolError."""
    buf = np.frombuffer(data, dtype=np.uint8)
    if bytes(buf[:3]) != _MAGIC or len(buf) < 4 or not 0 <= buf[3] <= _MAX_NDIM:
        raise ProtocolError("not a ternary upload (bad magic or ndim)")
    ndim = int(buf[3])
    shape_arr, pos = decode_uvarints(buf, 4, ndim)
    shape = tuple(int(s) for s in shape_arr)
    size = math.prod(shape)
    limit = max_size if max_size is not None else 2**40
    if size > limit:
        raise ProtocolError(f"upload size {size} exceeds the limit {limit}")
    if pos + 8 > len(buf):
        raise ProtocolError("truncated ternary upload")
    (r,) = struct.unpack_from("<d", data, pos)
    if not (math.isfinite(r) and r > 0):
        raise ProtocolError("r must be positive and finite")
    (count, stream), pos = decode_uvarints(buf, pos + 8, 2)
    count, stream = int(count), int(stream)
    if count > size or pos + stream + (count + 7) // 8 != len(buf):
        raise ProtocolError("ternary upload length does not match its header")
    indices = _indices_from_gaps(buf[pos:pos + stream], count, size)
    bits = np.unpackbits(buf[pos + stream:])
    if bits[count:].any():
        raise ProtocolError("non-zero padding in sign bits")
    signs = bits[:count].astype(np.int8) * np.int8(2) - np.int8(1)
    try:
        return TernaryUpload(shape=shape, r=float(r), indices=indices, signs=signs)
    except ValueError as exc:  # unreachable after the checks above; keeps the error type
        raise ProtocolError(str(exc)) from exc


def _indices_from_gaps(stream: np.ndarray, count: int, size: int) -> np.ndarray:
    gaps, used = decode_uvarints(stream, 0, count)
    if used != len(stream):
        raise ProtocolError("index stream has trailing bytes")
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    # Bound the sum before the exact integer cumsum so it cannot wrap around.
    if gaps.max() >= size or float(gaps.astype(np.float64).sum()) + count > size + 1:
        raise ProtocolError("index out of range")
    indices = np.cumsum(gaps.astype(np.int64) + 1) - 1
    if indices[-1] >= size:
        raise ProtocolError("index out of range")
    return indices
