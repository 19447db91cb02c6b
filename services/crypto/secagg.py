"""Secure aggregation (pairwise masking, as in SecAgg) and a seed the parties agree on without the coordinator.

Each party holds a long-lived secret (never sent). From it, per run, it derives an X25519 key pair
and (per party) an Ed25519 identity key; it announces its X25519 public key signed with the
identity key, and the coordinator only relays the announcements. Two parties u, v derive the same
pairwise key k_uv from X25519(sk_u, pk_v); the coordinator, holding neither secret key, cannot.

Masking: a party's float message is encoded in fixed point (FRAC_BITS fractional bits) as int64
viewed as uint64, so sums wrap in Z_2^64 and masks cancel exactly. For a step (round, attempt, step
name, layer) and the step's participant list, party u adds +PRG(k_uv, step) for every v > u and
−PRG(k_uv, step) for every v < u; the sum over all participants is the sum of the encodings. The
PRG is SHAKE-256 keyed by k_uv and the step, so masks are fresh per round, attempt, step and layer.
If v fails during a step, each survivor u reveals only its step masks with v (`recovery`), which
the coordinator subtracts: v sent nothing that step, so nothing of v is exposed, and u's own value
stays masked by its masks with the other survivors.

Seed agreement: each party contributes HMAC(secret, "projection-seed" ‖ run seed), sealed
(XSalsa20-Poly1305) for each peer under a key derived from k_uv; everyone opens the others'
contributions and hashes all of them in party-id order. The coordinator relays sealed boxes only,
so it cannot compute the agreed seed, hence neither Φ nor anything seeded from it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import nacl.bindings
import nacl.exceptions
import nacl.public
import nacl.secret
import nacl.signing
import numpy as np

from services.errors import CryptoError

FRAC_BITS = 32  # fixed-point precision: |error| <= 2^-33 per value, range ±2^31
_SCALE = float(1 << FRAC_BITS)
_LIMIT = float(1 << (63 - FRAC_BITS))


def encode_fixed(x: np.ndarray) -> np.ndarray:
    """Float values → flat uint64 fixed-point encodings (two's complement, wraps in Z_2^64)."""
    flat = np.asarray(x, dtype=np.float64).ravel()
    if flat.size and (not np.all(np.isfinite(flat)) or float(np.max(np.abs(flat))) >= _LIMIT):
        raise CryptoError(f"value out of the fixed-point range ±{_LIMIT:g} (or not finite)")
    return np.rint(flat * _SCALE).astype(np.int64).view(np.uint64)


def decode_fixed(u: np.ndarray) -> np.ndarray:
    """uint64 fixed-point encodings (e.g. a sum of them) → float64 values."""
    return np.asarray(u, dtype=np.uint64).view(np.int64).astype(np.float64) / _SCALE


def _h(*parts: bytes) -> bytes:
    d = hashlib.sha256()
    for p in parts:
        d.update(len(p).to_bytes(4, "big") + p)
    return d.digest()


def prg(key: bytes, context: str, size: int) -> np.ndarray:
    """`size` pseudo-random uint64 words from SHAKE-256(key ‖ context)."""
    return np.frombuffer(hashlib.shake_256(_h(key, context.encode())).digest(8 * size), dtype=np.uint64).copy()


def step_context(*, round_index: int, attempt: int, step: str, layer: int) -> str:
    """The label that makes masks fresh per round, attempt, step and layer."""
    return f"r{round_index}|a{attempt}|{step}|l{layer}"


def _statement(run_id: str, party_id: str, dh_public: bytes) -> bytes:
    return _h(b"fedrec-secagg-key", run_id.encode(), party_id.encode(), dh_public)


def survivors_statement(*, run_id: str, round_index: int, attempt: int, label: str,
                        survivors: Sequence[str], inputs: str = "") -> bytes:
    """What a party signs in the consistency round: the survivor set of one masked step of one attempt, and the
    digest of the public inputs the attempt began with (parties told different things sign different statements)."""
    return _h(b"fedrec-secagg-survivors", run_id.encode(), f"r{round_index}|a{attempt}|{label}".encode(),
              inputs.encode(), *[p.encode() for p in sorted(survivors)])


def signature_valid(identity: str, statement: bytes, signature: str) -> bool:
    """Whether `signature` (hex) is the Ed25519 signature of `statement` under the hex identity key."""
    try:
        nacl.signing.VerifyKey(bytes.fromhex(identity)).verify(statement, bytes.fromhex(signature))
    except (ValueError, TypeError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        return False
    return True


@dataclass(frozen=True)
class KeyAnnouncement:
    """A party's X25519 public key for one run, signed with its Ed25519 identity key (all hex)."""

    party_id: str
    dh_public: str
    identity: str
    signature: str

    def verify(self, run_id: str) -> None:
        """Check the signature binds this key to this party and run; CryptoError if not."""
        try:
            key = nacl.signing.VerifyKey(bytes.fromhex(self.identity))
            key.verify(_statement(run_id, self.party_id, bytes.fromhex(self.dh_public)), bytes.fromhex(self.signature))
        except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError) as exc:
            raise CryptoError(f"key announcement of {self.party_id} does not verify: {exc}") from exc


class SecAggParty:
    """One party's secure-aggregation state for one run: its keys, and the pairwise keys with its peers."""

    def __init__(self, *, party_id: str, secret: bytes, run_id: str, nonce: int = 0) -> None:
        if len(secret) < 16:
            raise CryptoError("a party secret must have at least 16 bytes")
        self.party_id, self.run_id, self._secret = party_id, run_id, secret
        # how many earlier masked runs this party configured with the same seed (its own count): it enters the
        # projection seed, so no two runs start from the same values; 0 keeps the first run as seeded
        self.nonce = nonce
        self._dh = nacl.public.PrivateKey(_h(b"dh", secret, run_id.encode()))
        self._sign = nacl.signing.SigningKey(_h(b"identity", secret))
        self.pair_keys: dict[str, bytes] = {}
        self.identities: dict[str, str] = {}  # peer id -> the identity key its accepted announcement was signed with

    def derived_seed(self, label: str, run_seed: int) -> int:
        """A 63-bit seed only this party can compute (party-local randomness: init, noise, quantization)."""
        mac = hmac.new(self._secret, f"{label}|{run_seed}".encode(), hashlib.sha256).digest()
        return int.from_bytes(mac[:8], "big") >> 1

    @property
    def identity(self) -> str:
        """Hex Ed25519 public identity key (stable for this party secret; pin it at the peers)."""
        return bytes(self._sign.verify_key).hex()

    def announce(self) -> KeyAnnouncement:
        """This party's signed key announcement."""
        pub = bytes(self._dh.public_key)
        sig = self._sign.sign(_statement(self.run_id, self.party_id, pub)).signature
        return KeyAnnouncement(self.party_id, pub.hex(), self.identity, sig.hex())

    def sign(self, statement: bytes) -> str:
        """Hex Ed25519 signature of a statement with this party's long-term identity key."""
        return bytes(self._sign.sign(statement).signature).hex()

    def accept(self, peers: Sequence[KeyAnnouncement], *, pinned: Mapping[str, str] | None = None) -> None:
        """Verify the peers' announcements (and pinned identities) and derive a pairwise key with each."""
        own = bytes(self._dh.public_key)
        keys: dict[str, bytes] = {}
        identities: dict[str, str] = {}
        for a in peers:
            if a.party_id == self.party_id:
                if a.dh_public != own.hex():
                    raise CryptoError("the relayed announcement of this party is not its own key")
                continue
            a.verify(self.run_id)
            if pinned and a.party_id in pinned and pinned[a.party_id] != a.identity:
                raise CryptoError(f"identity key of {a.party_id} differs from the pinned one")
            identities[a.party_id] = a.identity
            other = bytes.fromhex(a.dh_public)
            shared = nacl.bindings.crypto_scalarmult(bytes(self._dh), other)
            lo, hi = sorted([(self.party_id, own), (a.party_id, other)])
            keys[a.party_id] = _h(b"fedrec-pair", shared, self.run_id.encode(), lo[0].encode(), lo[1],
                                  hi[0].encode(), hi[1])
        self.pair_keys, self.identities = keys, identities

    def _peer(self, party_id: str) -> bytes:
        try:
            return self.pair_keys[party_id]
        except KeyError as exc:
            raise CryptoError(f"no pairwise key with {party_id} (not in the run's key agreement)") from exc

    # ---- masking ---------------------------------------------------------------------------
    def mask(self, encoded: np.ndarray, *, participants: Sequence[str], context: str) -> np.ndarray:
        """encoded + Σ_{v>u} PRG(k_uv) − Σ_{v<u} PRG(k_uv) over the step's participants."""
        others = sorted(set(participants) - {self.party_id})
        if self.party_id not in participants or not others:
            raise CryptoError("a masked step needs this party and at least one other participant")
        out = np.asarray(encoded, dtype=np.uint64).copy()
        for v in others:
            m = prg(self._peer(v), context, out.size)
            out = out + m if self.party_id < v else out - m
        return out

    def recovery(self, *, dropped: Sequence[str], size: int, context: str) -> np.ndarray:
        """This party's step masks with the dropped parties (the coordinator subtracts them from the sum)."""
        out = np.zeros(size, dtype=np.uint64)
        for v in sorted(set(dropped) - {self.party_id}):
            m = prg(self._peer(v), context, size)
            out = out + m if self.party_id < v else out - m
        return out

    # ---- seed agreement ----------------------------------------------------------------------
    def box_key(self, party_id: str) -> bytes:
        """The key of boxes sealed for (and by) one peer within a round (double masking's key shares)."""
        return _h(b"fedrec-step-seal", self._peer(party_id))

    def _box(self, party_id: str) -> nacl.secret.SecretBox:
        return nacl.secret.SecretBox(_h(b"fedrec-seal", self._peer(party_id)))

    def contribution(self, run_seed: int) -> bytes:
        """This party's 32-byte share of the agreed seed."""
        label = f"projection-seed|{run_seed}" + (f"|{self.nonce}" if self.nonce else "")
        return hmac.new(self._secret, label.encode(), hashlib.sha256).digest()

    def seal_contribution(self, run_seed: int) -> dict[str, str]:
        """The contribution sealed for each peer (hex), to be relayed by the coordinator."""
        share = self.contribution(run_seed)
        return {v: bytes(self._box(v).encrypt(share)).hex() for v in sorted(self.pair_keys)}

    def agreed_seed(self, run_seed: int, sealed: Mapping[str, str]) -> int:
        """Open every peer's sealed contribution (addressed to this party) and hash them all in id order."""
        if set(sealed) != set(self.pair_keys):
            raise CryptoError(f"seed contributions from {sorted(sealed)}, expected {sorted(self.pair_keys)}")
        shares = {self.party_id: self.contribution(run_seed)}
        for v, box in sealed.items():
            try:
                shares[v] = self._box(v).decrypt(bytes.fromhex(box))
            except (ValueError, nacl.exceptions.CryptoError) as exc:
                raise CryptoError(f"seed contribution of {v} does not open: {exc}") from exc
        return agreed_seed(shares)


def agreed_seed(shares: Mapping[str, bytes]) -> int:
    """The seed every party computes from all contributions (63 bits: too many to guess and test)."""
    digest = _h(b"fedrec-agreed-seed", *[p.encode() + shares[p] for p in sorted(shares)])
    return int.from_bytes(digest[:8], "big") >> 1
