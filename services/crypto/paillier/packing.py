"""Slot packing of several signed fixed-point integers into one Paillier plaintext.

A packed plaintext is V = sum_s v_s * 2^(W*s) (mod n) with signed slot values
|v_s| < 2^(W-1). If W*S <= bits(n) - 2 then |V| < n/2, so the centred lift of the
decrypted residue is V itself and the slots are peeled off from slot 0 upwards with
a signed (centred) remainder mod 2^W. Homomorphically, B builds V from ciphertexts
with Horner's rule c <- c^(2^W) * c'. Only the FINAL slot values must satisfy the
bound (the map is linear mod n), so bounds are checked on the final result only.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.errors import CryptoError

_HEADROOM_BITS = 2


@dataclass(frozen=True)
class PackingSpec:
    """Public packing layout: `slots` signed values of `slot_bits` bits per plaintext."""

    slot_bits: int
    slots: int

    def __post_init__(self) -> None:
        if self.slot_bits < 2 or self.slots < 1:
            raise CryptoError(f"invalid packing spec {self}")


def slot_bits_for(bound: int) -> int:
    """Smallest W with every |v| <= bound representable as a signed W-bit slot (bound < 2^(W-1))."""
    if bound < 0:
        raise CryptoError("bound must be non-negative")
    return bound.bit_length() + 1


def spec_for(n: int, bound: int, *, max_slots: int | None = None) -> PackingSpec:
    """Largest slot count whose packed value provably fits (W*S <= bits(n) - 2).

    Args:
        n: Paillier modulus.
        bound: public bound on |final slot value| (integer, at the result's scale).
        max_slots: optional cap (e.g. the number of rows to pack).
    Returns:
        The PackingSpec; raises CryptoError when not even one slot fits.
    """
    width = slot_bits_for(bound)
    slots = (n.bit_length() - _HEADROOM_BITS) // width
    if max_slots is not None:
        slots = min(slots, max_slots)
    if slots < 1:
        raise CryptoError(f"a {width}-bit slot does not fit a {n.bit_length()}-bit modulus")
    return PackingSpec(width, slots)


def check_spec(n: int, spec: PackingSpec) -> None:
    """Reject layouts whose packed value could wrap around n."""
    if spec.slot_bits * spec.slots > n.bit_length() - _HEADROOM_BITS:
        raise CryptoError(f"{spec.slots} slots of {spec.slot_bits} bits overflow a "
                          f"{n.bit_length()}-bit modulus")


def pack_plain(values: list[int], spec: PackingSpec, n: int) -> int:
    """Pack signed slot values (slot 0 = least significant) into a residue mod n."""
    if len(values) > spec.slots:
        raise CryptoError(f"{len(values)} values for {spec.slots} slots")
    limit = 1 << (spec.slot_bits - 1)
    acc = 0
    for v in reversed(values):
        if not -limit < v < limit:
            raise CryptoError(f"slot value {v} exceeds {spec.slot_bits}-bit signed slot")
        acc = (acc << spec.slot_bits) + int(v)
    return acc % n


def unpack_signed(residue: int, spec: PackingSpec, n: int, count: int) -> list[int]:
    """Centred lift of a decrypted residue, then signed slot values 0..count-1."""
    value = residue - n if residue > n // 2 else residue
    width, mask, half = spec.slot_bits, (1 << spec.slot_bits) - 1, 1 << (spec.slot_bits - 1)
    out = []
    for _ in range(count):
        v = value & mask
        if v >= half:
            v -= 1 << width
        out.append(v)
        value = (value - v) >> width
    if value != 0:
        raise CryptoError("packed plaintext has content beyond its slots (bound violated)")
    return out
