"""Fixed-point encoding compatible with python-paillier's base-16 exponents.

A real value x is carried as the integer round(x * 2^f). python-paillier (phe) encodes
numbers as mantissa * 16^exponent, so a scale 2^f with f a multiple of 4 is exactly the
phe exponent -f/4: an integer result at scale 2^f, reduced mod n, is a valid
``EncryptedNumber(public_key, c, -f // 4)`` that ``PaillierPrivateKey.decrypt`` decodes,
negative values included (phe treats mantissas above n - max_int as negative).
"""

from __future__ import annotations

import numpy as np

from services.errors import CryptoError

BASE_BITS = 4  # phe's EncodedNumber.BASE == 16 == 2**4
_MAX_INT64_BITS = 62


def exponent_for(frac_bits: int) -> int:
    """phe exponent of the scale 2^frac_bits (frac_bits must be a non-negative multiple of 4)."""
    if frac_bits < 0 or frac_bits % BASE_BITS:
        raise CryptoError(f"frac_bits={frac_bits} must be a non-negative multiple of {BASE_BITS}")
    return -frac_bits // BASE_BITS


def frac_bits_for(exponent: int) -> int:
    """Inverse of `exponent_for`: the number of fractional bits of a phe exponent <= 0."""
    if exponent > 0:
        raise CryptoError(f"exponent {exponent} > 0 is not a fixed-point scale")
    return -exponent * BASE_BITS


def encode(values: np.ndarray, frac_bits: int) -> np.ndarray:
    """Round values * 2^frac_bits to int64 (refusing NaN/inf and magnitudes past 2^62).

    Args:
        values: real array of any shape.
        frac_bits: fractional bits (multiple of 4).
    Returns:
        int64 array of the same shape.
    """
    exponent_for(frac_bits)
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise CryptoError("cannot fixed-point encode NaN or infinity")
    scaled = np.rint(np.ldexp(arr, frac_bits))
    if arr.size and float(np.abs(scaled).max()) >= 2.0**_MAX_INT64_BITS:
        raise CryptoError(f"value too large for {frac_bits} fractional bits")
    return scaled.astype(np.int64)


def decode(ints: np.ndarray | list[int], frac_bits: int) -> np.ndarray:
    """Map integers at scale 2^frac_bits back to float64 (exact for |v| < 2^53)."""
    arr = np.asarray([float(v) for v in np.ravel(np.asarray(ints, dtype=object))], dtype=np.float64)
    return np.ldexp(arr, -frac_bits).reshape(np.shape(ints))


def centred(residue: int, n: int) -> int:
    """Plaintext residue in [0, n) -> signed integer in (-n/2, n/2]."""
    return residue - n if residue > n // 2 else residue
