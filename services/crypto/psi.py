"""Multi-party ECDH private set intersection of user ids (semi-honest), via PyNaCl/libsodium.

Group: the prime-order (ℓ ≈ 2²⁵²) subgroup of edwards25519.  PyNaCl 1.6 does not expose
libsodium's ristretto255 functions, so we use the ed25519 ones with the checks that make
them equivalent for this purpose: every received point must be canonical, of prime order ℓ
and not of small order (``crypto_core_ed25519_is_valid_point`` / the checks inside
``crypto_scalarmult_ed25519_noclamp``), and hashing to the group adds two Elligator-2
maps of the halves of SHA-512 (the construction ristretto255's ``from_hash`` uses).

Protocol, P parties with agreed order, secrets a_p, sets S_p, coordinator as relay:

1. Party p sends L_p = [H(x)^{a_p} : x ∈ S_p], sorted by value (a key-dependent,
   uniformly random order to anyone without a_p; ids never leave the party).
2. Ring: in step s = 1..P−1, party (p+s) mod P raises every point of L_p to its secret and
   keeps the order.  After P−1 steps L_p holds T(x) = H(x)^{Π_q a_q}, still in p's order.
3. The coordinator intersects the P token lists and broadcasts the sorted common tokens;
   each party maps them to its own ids by index in its own final list.  The aligned user
   index is the position in that sorted list: identical at every party, pseudorandom.

What is hidden (DDH on the group, H a random oracle): ids outside the intersection from
everyone; all ids from the coordinator.  What leaks: every |S_p| (to all), and to the
coordinator the size of every combination of sets (which tokens are common to which
parties).  A coordinator colluding with party p learns S_p ∩ S_q for each q; a malicious
coordinator can lie about the intersection (semi-honest model).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nacl import bindings as sodium
from nacl import exceptions as nacl_exc

from services.errors import CryptoError

POINT_BYTES = 32
DOMAIN = b"fedrec/psi/v1/user-id\x00"


def new_secret(rng_bytes: Callable[[int], bytes] = os.urandom) -> bytes:
    """A uniformly random non-zero scalar mod ℓ (32 bytes), from 64 random bytes."""
    while True:
        scalar: bytes = sodium.crypto_core_ed25519_scalar_reduce(rng_bytes(64))
        if any(scalar):
            return scalar


def hash_to_group(identifier: str) -> bytes:
    """H(id): SHA-512 of the domain-separated id, two Elligator-2 maps, added."""
    digest = hashlib.sha512(DOMAIN + identifier.encode("utf-8")).digest()
    left = sodium.crypto_core_ed25519_from_uniform(digest[:32])
    right = sodium.crypto_core_ed25519_from_uniform(digest[32:])
    point: bytes = sodium.crypto_core_ed25519_add(left, right)
    return point


def _check_secret(secret: bytes) -> None:
    if len(secret) != POINT_BYTES or not any(secret):
        raise CryptoError("PSI secret must be a non-zero 32-byte scalar")


def _mul(secret: bytes, point: bytes) -> bytes:
    """point^secret; libsodium rejects non-canonical, small-order and off-subgroup points."""
    if not isinstance(point, bytes | bytearray) or len(point) != POINT_BYTES:
        raise CryptoError("PSI point must be 32 bytes")
    try:
        out: bytes = sodium.crypto_scalarmult_ed25519_noclamp(secret, bytes(point))
    except nacl_exc.RuntimeError as exc:
        raise CryptoError("invalid PSI point (not in the prime-order group)") from exc
    return out


def blind(ids: Sequence[str], secret: bytes) -> list[bytes]:
    """[H(x)^a for x in ids], in input order.

    Args:
        ids: distinct identifiers.
        secret: this party's scalar a from :func:`new_secret`.

    Returns:
        32-byte points; pseudorandom to anyone without ``secret`` (DDH).
    """
    _check_secret(secret)
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be distinct")
    return [_mul(secret, hash_to_group(x)) for x in ids]


def reblind(points: Sequence[bytes], secret: bytes) -> list[bytes]:
    """[P^a for P in points], order kept; raises CryptoError on any invalid point."""
    _check_secret(secret)
    return [_mul(secret, p) for p in points]


@dataclass(frozen=True)
class PsiParty:
    """A party's PSI state: its secret and its ids in the order of its outgoing list."""

    secret: bytes
    ids: tuple[str, ...]
    blinded: tuple[bytes, ...]

    @classmethod
    def create(cls, ids: Sequence[str], *, rng_bytes: Callable[[int], bytes] = os.urandom) -> PsiParty:
        """Draw a secret, blind the ids, order them by blinded value (step 1)."""
        secret = new_secret(rng_bytes)
        pairs = sorted(zip(blind(ids, secret), ids, strict=True))
        return cls(secret=secret, ids=tuple(i for _, i in pairs), blinded=tuple(p for p, _ in pairs))

    def outgoing(self) -> list[bytes]:
        """The first message: this party's singly-blinded list."""
        return list(self.blinded)

    def reblind(self, points: Sequence[bytes]) -> list[bytes]:
        """A ring step on another party's list."""
        return reblind(points, self.secret)

    def align(self, own_tokens: Sequence[bytes], intersection: Sequence[bytes]) -> list[str]:
        """Own ids of the intersection in aligned order (position = aligned user index).

        Args:
            own_tokens: this party's list after the full ring, in its outgoing order.
            intersection: the coordinator's sorted common tokens.
        """
        if len(own_tokens) != len(self.ids):
            raise CryptoError("fully blinded list does not match this party's set size")
        index = {t: i for i, t in enumerate(own_tokens)}
        if list(intersection) != sorted(set(intersection)):
            raise CryptoError("intersection must be sorted and distinct")
        missing = [t for t in intersection if t not in index]
        if missing:
            raise CryptoError(f"{len(missing)} intersection tokens are not in this party's set")
        return [self.ids[index[t]] for t in intersection]


def ring_owner(parties: Sequence[str], *, reblinder: str, step: int) -> str:
    """Whose list ``reblinder`` raises to its secret in ring step ``step`` (1..P−1)."""
    if not 1 <= step < len(parties):
        raise ValueError("step must lie in 1..P-1")
    return parties[(parties.index(reblinder) - step) % len(parties)]


def intersect_tokens(final_lists: Mapping[str, Sequence[bytes]]) -> list[bytes]:
    """Coordinator side: tokens present in every party's fully blinded list, sorted."""
    if not final_lists:
        raise ValueError("no token lists")
    sets = [set(tokens) for tokens in final_lists.values()]
    if any(len(t) != POINT_BYTES for s in sets for t in s):
        raise CryptoError("PSI tokens must be 32 bytes")
    return sorted(set.intersection(*sets))


def run_psi(parties: Mapping[str, PsiParty]) -> tuple[dict[str, list[bytes]], list[bytes]]:
    """In-process run of the whole protocol: (fully blinded list per party, intersection).

    The HTTP federation does the same with the coordinator relaying each message.
    """
    names = list(parties)
    lists = {name: parties[name].outgoing() for name in names}
    for step in range(1, len(names)):
        nxt: dict[str, list[bytes]] = {}
        for reblinder in names:
            owner = ring_owner(names, reblinder=reblinder, step=step)
            nxt[owner] = parties[reblinder].reblind(lists[owner])
        lists = nxt
    return lists, intersect_tokens(lists)
