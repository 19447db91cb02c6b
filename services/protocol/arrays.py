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


def parse_npy(data: bytes | bytearray | memoryview) -> np.ndarray:
    """.npy bytes to an array, checking the header against the data before anything is allocated.

    np.load trusts the header's shape and allocates it first: a few bytes claiming a huge shape cost
    memory (or raise an unexpected error). Here the declared size must equal the bytes present, object
    dtypes (pickles) are refused, and the array is a view of the input (writable when the input is).
    """
    buf = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buf)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(buf)
    except Exception as exc:
        raise ProtocolError(f"malformed array header: {exc}") from exc
    if dtype.hasobject:
        raise ProtocolError("object arrays are not accepted")
    count = 1
    for dim in shape:
        count *= int(dim)
    body = memoryview(data)[buf.tell():]
    if count * dtype.itemsize != len(body):
        raise ProtocolError(f"array header declares shape {shape} of {dtype} ({count * dtype.itemsize} bytes) "
                            f"but {len(body)} bytes follow")
    arr = np.frombuffer(body, dtype=dtype, count=count)
    return arr.reshape(shape, order="F" if fortran else "C")


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
    arr = parse_npy(bytearray(data))  # a writable copy: callers own what they decode
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise ProtocolError(f"array dtype {arr.dtype} != expected {np.dtype(dtype)}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            raise ProtocolError(f"array shape {arr.shape} != expected {shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ProtocolError("array contains NaN or infinity")
    return arr
