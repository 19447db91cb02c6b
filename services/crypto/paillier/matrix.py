"""Containers of the encrypted-product protocol: EncryptedMatrix, PackedResult, SparseRows.

Ciphertexts are raw phe ciphertext integers (gmpy2 mpz) kept row-major with one phe
exponent for the whole matrix, so any entry converts to ``phe.EncryptedNumber(pk, c, e)``.
The binary wire format is a fixed header plus fixed-width big-endian ciphertexts, and a
matrix can be cut into row chunks that travel (and are validated) independently.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import gmpy2
import numpy as np
from phe import EncryptedNumber, PaillierPublicKey

from services.crypto.paillier.packing import PackingSpec
from services.errors import CryptoError, ProtocolError

_MAGIC = b"FRPM"
_VERSION = 1
# magic, version, exponent, rows, cols, row_offset, total_rows, ct_bytes, bound
_HEADER = struct.Struct(">4sBiIIIIId")


def ciphertext_bytes(public_key: PaillierPublicKey) -> int:
    """Fixed width of one serialised ciphertext (bytes of n^2)."""
    return (public_key.nsquare.bit_length() + 7) // 8


def validate_ciphertexts(public_key: PaillierPublicKey, cts: Sequence[int], *,
                         check_gcd: bool = False) -> None:
    """Raise CryptoError unless 0 < c < n^2 (and gcd(c, n) = 1 when check_gcd) for every c."""
    n2 = gmpy2.mpz(public_key.nsquare)
    n = gmpy2.mpz(public_key.n)
    for i, c in enumerate(cts):
        if not 0 < c < n2:
            raise CryptoError(f"ciphertext {i} out of range (0, n^2)")
        if check_gcd and gmpy2.gcd(c, n) != 1:
            raise CryptoError(f"ciphertext {i} is not a unit mod n")


@dataclass
class EncryptedMatrix:
    """rows x cols Paillier ciphertexts (raw mpz, row-major) at one phe exponent.

    `bound` is the PUBLIC bound on the l2 norm of every plaintext row (real units) that the
    encrypting party promises (it also bounds every entry); sandwich products derive their
    slot widths from it.
    """

    public_key: PaillierPublicKey
    rows: int
    cols: int
    exponent: int
    data: list = field(repr=False)
    bound: float = 1.0

    def __post_init__(self) -> None:
        if self.rows < 0 or self.cols < 0 or len(self.data) != self.rows * self.cols:
            raise ProtocolError(f"{len(self.data)} ciphertexts for shape {self.shape}")
        if not (self.bound >= 0 and math.isfinite(self.bound)):
            raise ProtocolError(f"invalid public bound {self.bound}")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def row(self, i: int) -> list:
        """The ciphertexts of row i."""
        return self.data[i * self.cols:(i + 1) * self.cols]

    def validate(self, *, check_gcd: bool = False) -> None:
        """Check every ciphertext is in (0, n^2) (and a unit mod n if check_gcd)."""
        validate_ciphertexts(self.public_key, self.data, check_gcd=check_gcd)

    def to_phe(self) -> list[list[EncryptedNumber]]:
        """phe EncryptedNumbers (serialise them with ciphertext(be_secure=False): already fresh)."""
        pk, e = self.public_key, self.exponent
        return [[EncryptedNumber(pk, int(c), e) for c in self.row(i)] for i in range(self.rows)]

    @classmethod
    def from_phe(cls, public_key: PaillierPublicKey, numbers: Sequence[Sequence[EncryptedNumber]],
                 *, bound: float = 1.0) -> EncryptedMatrix:
        """Wrap phe EncryptedNumbers that share one exponent (raw ciphertexts, no obfuscation)."""
        flat = [x for row in numbers for x in row]
        exps = {x.exponent for x in flat}
        if len(exps) > 1:
            raise ProtocolError(f"mixed exponents {sorted(exps)}")
        if any(x.public_key != public_key for x in flat):
            raise CryptoError("ciphertext under a different public key")
        rows = len(numbers)
        cols = len(numbers[0]) if rows else 0
        data = [gmpy2.mpz(x.ciphertext(be_secure=False)) for x in flat]
        return cls(public_key, rows, cols, exps.pop() if exps else 0, data, bound)

    def take_rows(self, rows: Sequence[int]) -> EncryptedMatrix:
        """Sub-matrix of the given rows (no crypto work)."""
        data = [c for i in rows for c in self.row(int(i))]
        return EncryptedMatrix(self.public_key, len(rows), self.cols, self.exponent, data, self.bound)

    def to_bytes(self, row_start: int = 0, row_stop: int | None = None) -> bytes:
        """Binary chunk of rows [row_start, row_stop): header + fixed-width ciphertexts."""
        stop = self.rows if row_stop is None else row_stop
        if not 0 <= row_start <= stop <= self.rows:
            raise ProtocolError(f"bad row range [{row_start}, {stop})")
        width = ciphertext_bytes(self.public_key)
        head = _HEADER.pack(_MAGIC, _VERSION, self.exponent, stop - row_start, self.cols,
                            row_start, self.rows, width, self.bound)
        body = self.data[row_start * self.cols:stop * self.cols]
        return head + b"".join(int(c).to_bytes(width, "big") for c in body)

    def iter_chunks(self, rows_per_chunk: int) -> Iterator[bytes]:
        """Serialise as independent row chunks (for upload in several requests)."""
        for start in range(0, max(self.rows, 1), max(rows_per_chunk, 1)):
            yield self.to_bytes(start, min(start + rows_per_chunk, self.rows))

    @classmethod
    def from_bytes(cls, public_key: PaillierPublicKey, blob: bytes, *,
                   expect_shape: tuple[int | None, int | None] | None = None,
                   check_gcd: bool = False) -> EncryptedMatrix:
        """Parse and validate one chunk (range-checks every ciphertext)."""
        rows, cols, _, _, exponent, bound, data = _parse(public_key, blob, check_gcd)
        if expect_shape is not None:
            for want, got in zip(expect_shape, (rows, cols)):
                if want is not None and want != got:
                    raise ProtocolError(f"shape {(rows, cols)} != expected {expect_shape}")
        return cls(public_key, rows, cols, exponent, data, bound)

    @classmethod
    def from_chunks(cls, public_key: PaillierPublicKey, chunks: Sequence[bytes], *,
                    check_gcd: bool = False) -> EncryptedMatrix:
        """Reassemble row chunks (any order); rejects gaps, overlaps and header mismatches."""
        parts = sorted((_parse(public_key, b, check_gcd) for b in chunks), key=lambda p: p[2])
        if not parts:
            raise ProtocolError("no chunks")
        _, cols, _, total, exponent, bound, _ = parts[0]
        data: list = []
        expected_offset = 0
        for rows, c, offset, tot, e, bd, d in parts:
            if (c, tot, e, bd) != (cols, total, exponent, bound) or offset != expected_offset:
                raise ProtocolError("chunks do not tile one matrix")
            data.extend(d)
            expected_offset += rows
        if expected_offset != total:
            raise ProtocolError(f"chunks cover {expected_offset} of {total} rows")
        return cls(public_key, total, cols, exponent, data, bound)


def _parse(public_key: PaillierPublicKey, blob: bytes, check_gcd: bool) -> tuple:
    if len(blob) < _HEADER.size:
        raise ProtocolError("truncated encrypted-matrix header")
    magic, version, exponent, rows, cols, offset, total, width, bound = _HEADER.unpack_from(blob)
    if magic != _MAGIC or version != _VERSION:
        raise ProtocolError("not an encrypted-matrix payload (magic/version)")
    if width != ciphertext_bytes(public_key):
        raise CryptoError(f"ciphertext width {width} does not match the key")
    if offset + rows > total or len(blob) != _HEADER.size + rows * cols * width:
        raise ProtocolError("encrypted-matrix payload length/rows mismatch")
    mv = memoryview(blob)[_HEADER.size:]
    data = [gmpy2.mpz(int.from_bytes(mv[i:i + width], "big")) for i in range(0, len(mv), width)]
    validate_ciphertexts(public_key, data, check_gcd=check_gcd)
    return rows, cols, offset, total, exponent, bound, data


@dataclass
class PackedResult:
    """Packed sandwich output: ciphertext (block, col) holds rows block*S .. block*S+S-1 of col.

    Slot s of a packed plaintext holds the signed integer J[block*S + s, col] * 2^frac_bits
    (frac_bits = -4 * exponent); decode with ``context.decrypt_result``.
    """

    public_key: PaillierPublicKey
    rows: int
    cols: int
    exponent: int
    spec: PackingSpec
    data: list = field(repr=False)

    def __post_init__(self) -> None:
        blocks = -(-self.rows // self.spec.slots)
        if len(self.data) != blocks * self.cols:
            raise ProtocolError(f"{len(self.data)} packed ciphertexts for {blocks}x{self.cols}")

    @property
    def blocks(self) -> int:
        return -(-self.rows // self.spec.slots)

    def as_matrix(self) -> EncryptedMatrix:
        """The packed ciphertexts as a blocks x cols matrix (for the wire format)."""
        return EncryptedMatrix(self.public_key, self.blocks, self.cols, self.exponent, self.data, 0.0)

    def to_bytes(self) -> bytes:
        """Binary form: rows, slot layout, then the ciphertext matrix."""
        head = struct.pack(">III", self.rows, self.spec.slot_bits, self.spec.slots)
        return head + self.as_matrix().to_bytes()

    @classmethod
    def from_bytes(cls, public_key: PaillierPublicKey, blob: bytes) -> PackedResult:
        """Parse and range-check a packed result."""
        if len(blob) < 12:
            raise ProtocolError("truncated packed result")
        rows, width, slots = struct.unpack_from(">III", blob)
        mat = EncryptedMatrix.from_bytes(public_key, blob[12:])
        return cls(public_key, rows, mat.cols, mat.exponent, PackingSpec(width, slots), mat.data)


@dataclass(frozen=True)
class SparseRows:
    """CSR rows of a real matrix (B x n_cols): the left factor L of a sandwich product."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    n_cols: int

    def __post_init__(self) -> None:
        ptr = np.asarray(self.indptr)
        if ptr.ndim != 1 or ptr.size < 1 or ptr[0] != 0 or np.any(np.diff(ptr) < 0):
            raise ProtocolError("malformed CSR indptr")
        if ptr[-1] != len(self.indices) or len(self.indices) != len(self.values):
            raise ProtocolError("CSR indptr/indices/values lengths disagree")
        idx = np.asarray(self.indices)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_cols):
            raise ProtocolError(f"CSR column index outside [0, {self.n_cols})")
        if not np.isfinite(np.asarray(self.values, dtype=np.float64)).all():
            raise ProtocolError("CSR values contain NaN or infinity")

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(column indices, values) of row i."""
        a, b = int(self.indptr[i]), int(self.indptr[i + 1])
        return np.asarray(self.indices[a:b]), np.asarray(self.values[a:b], dtype=np.float64)

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseRows:
        """CSR of the non-zeros of a dense 2-D array."""
        arr = np.asarray(dense, dtype=np.float64)
        rows, cols = np.nonzero(arr)
        return cls.from_coo(rows, cols, arr[rows, cols], arr.shape)

    @classmethod
    def from_coo(cls, rows: np.ndarray, cols: np.ndarray, values: np.ndarray,
                 shape: tuple[int, int]) -> SparseRows:
        """CSR from COO triplets (duplicates are summed)."""
        r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        v = np.asarray(values, dtype=np.float64)
        if r.size and (r.min() < 0 or r.max() >= shape[0]):
            raise ProtocolError("COO row index out of range")
        key = r * shape[1] + c
        uniq, inv = np.unique(key, return_inverse=True)
        summed = np.zeros(uniq.size)
        np.add.at(summed, inv, v)
        ur = uniq // shape[1] if shape[1] else uniq
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.add.at(indptr, ur + 1, 1)
        return cls(np.cumsum(indptr), uniq % shape[1] if shape[1] else uniq, summed, shape[1])

    def to_dense(self) -> np.ndarray:
        """Dense float64 copy (tests, small inputs)."""
        out = np.zeros((self.n_rows, self.n_cols))
        for i in range(self.n_rows):
            cols, vals = self.row(i)
            out[i, cols] = vals
        return out
