"""Binary encoding of numpy arrays for the wire: np.save bytes (no pickle), dtype and shape checked."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

from services.errors import ProtocolError

ARRAY_MEDIA_TYPE = "application/x-npy"


def encode_array(array: np.ndarray) -> bytes:
    """Serialise an array to .npy bytes (allow_pickle=False)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def decode_array(
    data: bytes,
    *,
    dtype: npt.DTypeLike | None = None,
    shape: tuple[int | None, ...] | None = None,
    max_bytes: int = 1 << 31,
) -> np.ndarray:
    """Parse .npy bytes, refusing pickles, wrong dtypes/shapes, non-finite floats and oversize input."""
    if len(data) > max_bytes:
        raise ProtocolError(f"array payload of {len(data)} bytes exceeds {max_bytes}")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a protocol error
        raise ProtocolError(f"malformed array payload: {exc}") from exc
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise ProtocolError(f"array dtype {arr.dtype} != expected {np.dtype(dtype)}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            raise ProtocolError(f"array shape {arr.shape} != expected {shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ProtocolError("array contains NaN or infinity")
    return arr
