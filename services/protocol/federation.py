"""Binary wire encodings for federation payloads: nested dicts/lists of arrays and scalars as one npz; PSI points."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from services.errors import ProtocolError

FEDERATION_MEDIA_TYPE = "application/octet-stream"
PSI_POINT_BYTES = 32
_MANIFEST = "__manifest__"


def _flatten(obj: Any, arrays: list[np.ndarray]) -> Any:
    """Replace arrays by references into `arrays`; keep JSON-able scalars inline."""
    if isinstance(obj, np.ndarray):
        arrays.append(obj)
        return {"__a__": len(arrays) - 1}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise ProtocolError("only string keys can be encoded")
        return {"__d__": {k: _flatten(v, arrays) for k, v in obj.items()}}
    if isinstance(obj, (list, tuple)):
        return {"__l__": [_flatten(v, arrays) for v in obj]}
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise ProtocolError(f"cannot encode value of type {type(obj).__name__}")


def _inflate(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of _flatten."""
    if isinstance(node, dict):
        if "__a__" in node:
            key = f"a{int(node['__a__'])}"
            if key not in arrays:
                raise ProtocolError(f"manifest references missing array {key}")
            return arrays[key]
        if "__d__" in node:
            return {k: _inflate(v, arrays) for k, v in node["__d__"].items()}
        if "__l__" in node:
            return [_inflate(v, arrays) for v in node["__l__"]]
        raise ProtocolError("malformed manifest node")
    return node


def pack_tree(obj: Any) -> bytes:
    """Encode a nested structure of numpy arrays and scalars as npz bytes (no pickle)."""
    arrays: list[np.ndarray] = []
    manifest = _flatten(obj, arrays)
    buf = io.BytesIO()
    payload = {f"a{i}": np.asarray(a, order="C") for i, a in enumerate(arrays)}  # keeps 0-d shapes
    payload[_MANIFEST] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=False, **payload)
    return buf.getvalue()


def unpack_tree(data: bytes, *, max_bytes: int = 1 << 31, finite: bool = True) -> Any:
    """Decode pack_tree bytes; malformed input, pickles and non-finite floats raise ProtocolError."""
    if len(data) > max_bytes:
        raise ProtocolError(f"payload of {len(data)} bytes exceeds {max_bytes}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        manifest = json.loads(arrays.pop(_MANIFEST).tobytes().decode())
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed binary payload: {exc}") from exc
    if finite:
        for name, arr in arrays.items():
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise ProtocolError(f"array {name} contains NaN or infinity")
    return _inflate(manifest, arrays)


def encode_points(points: list[bytes]) -> bytes:
    """Concatenate fixed-size curve points."""
    if any(len(p) != PSI_POINT_BYTES for p in points):
        raise ProtocolError("every PSI point must be 32 bytes")
    return b"".join(points)


def decode_points(data: bytes, *, max_count: int = 50_000_000) -> list[bytes]:
    """Split concatenated 32-byte points."""
    if len(data) % PSI_POINT_BYTES:
        raise ProtocolError(f"PSI payload of {len(data)} bytes is not a multiple of {PSI_POINT_BYTES}")
    n = len(data) // PSI_POINT_BYTES
    if n > max_count:
        raise ProtocolError(f"too many PSI points ({n})")
    return [data[i * PSI_POINT_BYTES:(i + 1) * PSI_POINT_BYTES] for i in range(n)]
