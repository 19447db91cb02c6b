"""Binary wire encodings for federation payloads: nested dicts/lists of arrays and scalars as one npz; PSI points."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from services.errors import ProtocolError
from services.protocol.arrays import parse_npy

FEDERATION_MEDIA_TYPE = "application/octet-stream"
PSI_POINT_BYTES = 32
_MANIFEST = "__manifest__"
MAX_EXPANSION = 2  # uncompressed npz members over payload bytes (pack_tree does not compress)


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


def _members(data: bytes, *, max_bytes: int) -> dict[str, np.ndarray]:
    """The npz members, bounded before decompression: pack_tree stores them uncompressed, so the
    declared sizes may not exceed the payload (plus zip overhead) nor max_bytes; each member's npy
    header is checked against its size before its array exists."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        declared = sum(i.file_size for i in infos)
        if declared > min(max_bytes, MAX_EXPANSION * len(data) + (64 << 10)):
            raise ProtocolError(f"npz members declare {declared} bytes for a {len(data)}-byte payload")
        out = {}
        for info in infos:
            name = info.filename.removesuffix(".npy")
            buf = bytearray(info.file_size)  # writable, like np.load's arrays
            with archive.open(info) as member:  # decompresses at most the declared file_size
                if member.readinto(buf) != info.file_size:  # type: ignore[attr-defined]
                    raise ProtocolError(f"npz member {name} is shorter than declared")
            out[name] = parse_npy(buf)
        return out


def unpack_tree(data: bytes, *, max_bytes: int = 1 << 31, finite: bool = True) -> Any:
    """Decode pack_tree bytes; malformed input, pickles and non-finite floats raise ProtocolError."""
    if len(data) > max_bytes:
        raise ProtocolError(f"payload of {len(data)} bytes exceeds {max_bytes}")
    try:
        arrays = _members(data, max_bytes=max_bytes)
        manifest = json.loads(arrays.pop(_MANIFEST).tobytes().decode())
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
            RecursionError) as exc:
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
