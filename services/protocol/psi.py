"""PSI messages: blinded user ids travel as concatenated 32-byte curve points."""

from __future__ import annotations

from services.errors import ProtocolError

PSI_POINT_BYTES = 32


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
