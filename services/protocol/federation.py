"""Binary wire encodings for federation payloads: nested dicts/lists of arrays and scalars as one npz; PSI points."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from typing import Any

import numpy as np

from services.errors import ProtocolError
from services.protocol.arrays import parse_npy

FEDERATION_MEDIA_TYPE = "application/octet-stream"
PSI_POINT_BYTES = 32
_MANIFEST = "__manifest__"
MAX_EXPANSION = 2  # uncompressed npz members over payload bytes (pack_tree does not compress)
MAX_MEMBERS = 4096  # arrays in one payload (an engine state with optimizer moments has a few hundred)
MAX_DEPTH = 64  # manifest nesting (pack_tree's trees are a few levels deep)
ARRAY_KINDS = "biufcUS"  # bool, integers, floats, complex, strings: what pack_tree is given
_END, _ZIP64_LOCATOR, _ENTRY = b"PK\x05\x06", b"PK\x06\x07", b"PK\x01\x02"
_END_RECORD = struct.Struct("<4s4H2LH")  # signature, disks, entries here, entries, cd size, cd offset, comment
_ENTRY_SIZE = 46  # fixed part of a central directory entry


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


def _inflate(node: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
    """Inverse of _flatten; any node _flatten cannot have written is a ProtocolError."""
    if depth > MAX_DEPTH:
        raise ProtocolError(f"manifest nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, list):
        raise ProtocolError("malformed manifest node: a bare list")
    if not isinstance(node, dict):
        return node  # a JSON scalar
    if len(node) != 1:
        raise ProtocolError("malformed manifest node: expected one of __a__, __d__, __l__")
    ((tag, value),) = node.items()
    if tag == "__a__" and type(value) is int:
        if f"a{value}" not in arrays:
            raise ProtocolError(f"manifest references missing array a{value}")
        return arrays[f"a{value}"]
    if tag == "__d__" and isinstance(value, dict):
        return {k: _inflate(v, arrays, depth + 1) for k, v in value.items()}
    if tag == "__l__" and isinstance(value, list):
        return [_inflate(v, arrays, depth + 1) for v in value]
    raise ProtocolError(f"malformed manifest node {tag!r}")


def pack_tree(obj: Any) -> bytes:
    """Encode a nested structure of numpy arrays and scalars as npz bytes (no pickle)."""
    arrays: list[np.ndarray] = []
    manifest = _flatten(obj, arrays)
    buf = io.BytesIO()
    payload = {f"a{i}": np.asarray(a, order="C") for i, a in enumerate(arrays)}  # keeps 0-d shapes
    payload[_MANIFEST] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=False, **payload)
    return buf.getvalue()


def _central_directory_checked(data: bytes) -> None:
    """Count the archive's members from its central directory before zipfile parses it.

    zipfile builds an object per member, with no bound: 400,000 empty members (a 36 MB payload)
    cost a party +267 MB. The walk below reads the entries' fixed headers only and stops at
    MAX_MEMBERS; it covers the same bytes zipfile will (the directory just before its end record).
    """
    at = data.rfind(_END, max(0, len(data) - _END_RECORD.size - 0xFFFF))
    if at < 0 or len(data) - at < _END_RECORD.size:
        raise ProtocolError("malformed binary payload: not a zip archive")
    if data.rfind(_ZIP64_LOCATOR, max(0, at - 20), at) >= 0:
        raise ProtocolError("malformed binary payload: zip64 archives are not accepted")
    *_, total, cd_size, _, _ = _END_RECORD.unpack_from(data, at)
    if total > MAX_MEMBERS:
        raise ProtocolError(f"npz has {total} members; at most {MAX_MEMBERS} are accepted")
    pos, end, count = at - cd_size, at, 0
    if pos < 0:
        raise ProtocolError("malformed binary payload: central directory outside the payload")
    while pos < end:
        count += 1
        if count > MAX_MEMBERS:
            raise ProtocolError(f"npz has more than {MAX_MEMBERS} members")
        if data[pos:pos + 4] != _ENTRY or pos + _ENTRY_SIZE > end:
            raise ProtocolError("malformed binary payload: bad central directory entry")
        name, extra, comment = struct.unpack_from("<3H", data, pos + 28)
        pos += _ENTRY_SIZE + name + extra + comment


def _members(data: bytes, *, max_bytes: int) -> dict[str, np.ndarray]:
    """The npz members, bounded before decompression: pack_tree stores them uncompressed, so the
    declared sizes may not exceed the payload (plus zip overhead) nor max_bytes; each member's npy
    header is checked against its size before its array exists."""
    _central_directory_checked(data)
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
            if out[name].dtype.kind not in ARRAY_KINDS:  # structured, datetime: nothing pack_tree writes
                raise ProtocolError(f"npz member {name} has unsupported dtype {out[name].dtype}")
        return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def unpack_tree(data: bytes, *, max_bytes: int = 1 << 31, finite: bool = True) -> Any:
    """Decode pack_tree bytes; malformed input, pickles and non-finite floats raise ProtocolError."""
    if len(data) > max_bytes:
        raise ProtocolError(f"payload of {len(data)} bytes exceeds {max_bytes}")
    try:
        arrays = _members(data, max_bytes=max_bytes)
        if _MANIFEST not in arrays:
            raise ProtocolError("malformed binary payload: no manifest")
        manifest = json.loads(arrays.pop(_MANIFEST).tobytes().decode(), parse_constant=_no_constant)
        tree = _inflate(manifest, arrays)
    except (ProtocolError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - whatever zipfile, zlib or json raise, the bytes are malformed
        raise ProtocolError(f"malformed binary payload: {type(exc).__name__}: {exc}") from exc
    if finite:
        for name, arr in arrays.items():
            if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
                raise ProtocolError(f"array {name} contains NaN or infinity")
    return tree


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
