"""Double masking (SecAgg, Bonawitz et al. 2017): per-step self masks and pairwise masks, both Shamir-shared.

For each masked step of a round attempt, party u draws a fresh X25519 key pair (e_u, E_u) and a
16-byte self-mask seed b_u. It Shamir-shares b_u and e_u (two 16-byte halves) among the attempt's
participants with a majority threshold t = ⌊n/2⌋ + 1 (pycryptodome's Shamir over GF(2^128)), and
seals each peer's shares with the run's pairwise key (the coordinator relays boxes it cannot open).
Its upload is encode(x_u) + PRG(b_u) + Σ_{v>u} PRG(k_uv) − Σ_{v<u} PRG(k_uv), with k_uv derived from
X25519(e_u, E_v) and the step. To unmask a sum the coordinator asks the survivors, once per step, for
their shares of b_v of every survivor v and of e_u of every party u that dropped; an honest party
answers one partition (survivors, dropped) per step, so for each party it reveals either the shares
of its self mask or those of its pairwise key, never both. Reaching t shares of both for one party
would take two disjoint groups of t honest parties: impossible with t > n/2. A coordinator that lies
about who dropped therefore learns at most the sum over the parties it calls survivors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import nacl.bindings
import nacl.exceptions
import nacl.secret
import numpy as np
from Crypto.Protocol.SecretSharing import Shamir

from services.crypto.secagg import prg
from services.errors import CryptoError

SECRET_BYTES = 16
Share = tuple[int, str]  # (Shamir index, hex share)


def threshold_for(n: int) -> int:
    """Majority threshold: two disjoint groups can never both reach it."""
    return n // 2 + 1


def share_secret(secret: bytes, *, holders: Sequence[str], threshold: int) -> dict[str, Share]:
    """t-of-n Shamir shares of a 16-byte secret, one per holder (index = position in sorted holders + 1)."""
    names = sorted(holders)
    if len(secret) != SECRET_BYTES or not 1 <= threshold <= len(names):
        raise CryptoError("a shared secret has 16 bytes and 1 ≤ threshold ≤ holders")
    if threshold == 1:  # Shamir needs k ≥ 2: a 1-of-n share is the secret itself
        return {h: (i + 1, secret.hex()) for i, h in enumerate(names)}
    shares = Shamir.split(threshold, len(names), secret, ssss=False)
    return {h: (idx, s.hex()) for h, (idx, s) in zip(names, shares)}


def combine_shares(shares: Sequence[Share], *, threshold: int) -> bytes:
    """The secret from at least `threshold` distinct shares (CryptoError otherwise)."""
    distinct = {int(i): s for i, s in shares}
    if len(distinct) < threshold:
        raise CryptoError(f"{len(distinct)} shares, {threshold} needed")
    if threshold == 1:
        return bytes.fromhex(next(iter(distinct.values())))
    picked = sorted(distinct.items())[:threshold]
    return bytes(Shamir.combine([(i, bytes.fromhex(s)) for i, s in picked], ssss=False))


def public_key(private: bytes) -> bytes:
    """X25519 public key of a 32-byte private key."""
    return bytes(nacl.bindings.crypto_scalarmult_base(private))


def step_pair_key(private: bytes, peer_public: bytes, *, context: str, ids: tuple[str, str]) -> bytes:
    """k_uv of one step: X25519(e_u, E_v) bound to the step and the two ids (the same at u and v)."""
    shared = nacl.bindings.crypto_scalarmult(private, peer_public)
    lo, hi = sorted(ids)
    return hashlib.sha256(b"fedrec-step-pair|" + shared + f"|{context}|{lo}|{hi}".encode()).digest()


def pairwise_masks(private: bytes, *, me: str, peers: Mapping[str, bytes], context: str, size: int) -> np.ndarray:
    """Σ_{v>me} PRG(k_uv) − Σ_{v<me} PRG(k_uv) over the given peers' step public keys."""
    out = np.zeros(size, dtype=np.uint64)
    for v in sorted(peers):
        if v == me:
            continue
        m = prg(step_pair_key(private, peers[v], context=context, ids=(me, v)), context, size)
        out = out + m if me < v else out - m
    return out


def self_mask(seed: bytes, *, context: str, size: int) -> np.ndarray:
    """PRG(b_u) of one step."""
    return prg(b"fedrec-self|" + seed, context, size)


@dataclass(frozen=True)
class StepSecrets:
    """A party's secrets for one masked step: its step key pair and its self-mask seed."""

    private: bytes  # e_u (32 bytes)
    seed: bytes  # b_u (16 bytes)

    @staticmethod
    def draw(random_bytes: Callable[[int], bytes] = os.urandom) -> StepSecrets:
        """Fresh secrets from the given randomness."""
        return StepSecrets(random_bytes(32), random_bytes(SECRET_BYTES))

    @property
    def public(self) -> bytes:
        """E_u."""
        return public_key(self.private)

    def shares(self, *, holders: Sequence[str], threshold: int) -> dict[str, dict[str, object]]:
        """Each holder's shares: of the seed, and of the private key's two halves."""
        seed = share_secret(self.seed, holders=holders, threshold=threshold)
        lo = share_secret(self.private[:16], holders=holders, threshold=threshold)
        hi = share_secret(self.private[16:], holders=holders, threshold=threshold)
        return {h: {"seed": list(seed[h]), "key": [list(lo[h]), list(hi[h])]} for h in sorted(holders)}


def combine_private(halves: Sequence[Sequence[Share]], *, threshold: int) -> bytes:
    """e_u from shares of its two halves ([[lo share, hi share], …] from several holders)."""
    lo = combine_shares([tuple(h[0]) for h in halves], threshold=threshold)  # type: ignore[misc]
    hi = combine_shares([tuple(h[1]) for h in halves], threshold=threshold)  # type: ignore[misc]
    return lo + hi


def seal(box_key: bytes, payload: Mapping[str, object], *, context: str) -> str:
    """JSON payload sealed (XSalsa20-Poly1305) under a pairwise key, bound to a context (hex)."""
    body = json.dumps({"context": context, "payload": payload}, sort_keys=True).encode()
    return bytes(nacl.secret.SecretBox(box_key).encrypt(body)).hex()


def unseal(box_key: bytes, box: str, *, context: str) -> dict[str, object]:
    """The payload of a sealed box, checked to belong to the context (CryptoError otherwise)."""
    try:
        opened = json.loads(nacl.secret.SecretBox(box_key).decrypt(bytes.fromhex(box)))
    except (ValueError, nacl.exceptions.CryptoError) as exc:
        raise CryptoError(f"a sealed box does not open: {exc}") from exc
    if not isinstance(opened, dict) or opened.get("context") != context or not isinstance(opened.get("payload"), dict):
        raise CryptoError("a sealed box belongs to another step")
    payload: dict[str, object] = opened["payload"]
    return payload
