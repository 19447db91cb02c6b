"""Social-party use cases behind the API: sessions over the party's stored social links (framework-free).

Each session holds a SocialParty over the Paillier engine; its (ε, δ) is reserved in the ledger
(services.p4gcn.ledger) before the session exists.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import numpy as np
from phe import PaillierPublicKey
from sqlalchemy import select
from sqlalchemy.orm import Session, aliased, sessionmaker

from services.crypto.paillier import EncryptedMatrix, PackedResult
from services.data.types import SocialLinks
from services.db.party_tables import SocialLink, User
from services.errors import NotFound, ProtocolError
from services.p4gcn.graph import adjacency_from_links
from services.p4gcn.ledger import SocialBudget, budget_summary, reserve
from services.p4gcn.party import SocialParty, SocialPartyConfig, paillier_social_party
from services.protocol.social import SocialSessionCreate, decode_users, unframe

MAX_SESSIONS = 8
SESSION_IDLE_S = 3600.0  # a session unused this long is closed (its graph, keys and worker processes freed)


def load_links(session: Session) -> SocialLinks:
    """Every stored social link as external ids."""
    src, dst = aliased(User), aliased(User)
    rows = session.execute(
        select(src.external_id, dst.external_id, SocialLink.weight)
        .join(src, SocialLink.src_user_id == src.id).join(dst, SocialLink.dst_user_id == dst.id)
    ).all()
    return SocialLinks(np.array([r[0] for r in rows], dtype=object), np.array([r[1] for r in rows], dtype=object),
                       np.array([r[2] for r in rows], dtype=np.float32))


class SocialService:
    """Open sessions of one social party; each holds a SocialParty over the Paillier engine."""

    def __init__(self, *, sessions: sessionmaker[Session], min_key_bits: int = 2048, max_batch: int = 4096,
                 workers: int = 1, budget: SocialBudget) -> None:
        self.sessions, self.min_key_bits, self.max_batch, self.workers = sessions, min_key_bits, max_batch, workers
        self.budget = budget
        self._parties: dict[str, tuple[SocialParty, PaillierPublicKey, threading.Lock]] = {}
        self._lock = threading.Lock()
        self._users: dict[str, frozenset[str]] = {}  # aligned users of each session (erasure closes theirs)
        self._used: dict[str, float] = {}  # last use of each session (idle ones expire)

    def open(self, *, request: SocialSessionCreate) -> tuple[str, SocialParty]:
        """Build L_sym over the given aligned users and a fresh W_P2; returns (session id, party)."""
        if len(set(request.user_ids)) != len(request.user_ids):
            raise ProtocolError("user_ids must be distinct")
        public_key = PaillierPublicKey(int(request.public_key_n))
        with self.sessions() as s:
            links = load_links(s)
        cfg = SocialPartyConfig(dim=request.dim, epsilon_budget=request.epsilon, delta=request.delta,
                                planned_epochs=request.planned_epochs, noise_multiplier=request.noise_multiplier,
                                dp_enabled=request.dp_enabled, max_batch=self.max_batch,
                                min_key_bits=self.min_key_bits)
        party = paillier_social_party(config=cfg, adjacency=adjacency_from_links(links, request.user_ids),
                                      public_key=public_key, h_s=int(request.h_s),
                                      rng=np.random.default_rng(secrets.randbits(128)), workers=self.workers)
        sid = secrets.token_hex(16)
        with self._lock:
            try:  # the ledger is written before the session exists: a refused session serves nothing
                with self.sessions() as s:
                    reserve(s, budget=self.budget, session_id=sid, epsilon=request.epsilon, delta=request.delta,
                            dp_enabled=request.dp_enabled)
            except Exception:
                self._close(party)
                raise
            self._expire_idle()
            if len(self._parties) >= MAX_SESSIONS:
                oldest = next(iter(self._parties))
                self._close(self._parties.pop(oldest)[0])
                self._users.pop(oldest, None)
            self._parties[sid] = (party, public_key, threading.Lock())
            self._users[sid] = frozenset(request.user_ids)
            self._used[sid] = time.monotonic()
        return sid, party

    @staticmethod
    def _close(party: SocialParty) -> None:
        ctx = getattr(party.engine, "ctx", None)
        if ctx is not None:
            ctx.close()

    def get(self, session_id: str) -> tuple[SocialParty, PaillierPublicKey, threading.Lock]:
        """The session's party, key and lock (operations on one session run one at a time), or NotFound."""
        with self._lock:
            self._expire_idle()
            found = self._parties.get(session_id)
            if found is not None:
                self._used[session_id] = time.monotonic()
        if found is None:
            raise NotFound(f"social session {session_id!r} not found")
        return found

    def begin_epoch(self, *, session_id: str) -> dict[str, Any]:
        """Open a new epoch (X is uploaded next)."""
        party, _, lock = self.get(session_id)
        with lock:
            party.begin_epoch()
            return party.privacy_record()

    def upload_x(self, *, session_id: str, offset: int, body: bytes) -> None:
        """Store one chunk of [X]."""
        party, pk, lock = self.get(session_id)
        chunk = EncryptedMatrix.from_bytes(pk, body)
        with lock:
            party.upload_x(offset, chunk)

    def forward(self, *, session_id: str, body: bytes) -> bytes:
        """Packed [(B L) X W_P2 + Z] for the posted user batch."""
        party, _, lock = self.get(session_id)
        users = decode_users(body)
        with lock:
            result = party.forward(users)
        assert isinstance(result, PackedResult)
        return result.to_bytes()

    def _framed(self, session_id: str, body: bytes) -> tuple[SocialParty, threading.Lock, np.ndarray, EncryptedMatrix]:
        """The session's party and lock, and the users and [M] of a framed body under the session's key."""
        party, pk, lock = self.get(session_id)
        users, payload = unframe(body)
        return party, lock, users, EncryptedMatrix.from_bytes(pk, payload)

    def backward(self, *, session_id: str, body: bytes) -> bytes:
        """Packed [(B L B^T) G W_P2^T + Z'] for the framed (users, [G]) body."""
        party, lock, users, grad = self._framed(session_id, body)
        with lock:
            result = party.backward(users, grad)
        assert isinstance(result, PackedResult)
        return result.to_bytes()

    def update(self, *, session_id: str, body: bytes) -> None:
        """[X_B] += [dX_B] for the framed (users, [dX]) body."""
        party, lock, users, delta = self._framed(session_id, body)
        with lock:
            party.update_x(users, delta)

    def budget_summary(self) -> dict[str, Any]:
        """The social graph's lifetime ledger (reserved and remaining ε, δ; one row per session)."""
        with self.sessions() as s:
            return budget_summary(s, self.budget)

    def privacy(self, *, session_id: str) -> dict[str, Any]:
        """The session's privacy record."""
        party, _, lock = self.get(session_id)
        with lock:
            return party.privacy_record()

    def _expire_idle(self) -> None:
        """Close sessions idle for SESSION_IDLE_S (the caller holds the lock)."""
        now = time.monotonic()
        for sid in [s for s, used in self._used.items() if now - used > SESSION_IDLE_S]:
            found = self._parties.pop(sid, None)
            self._users.pop(sid, None)
            self._used.pop(sid, None)
            if found is not None:
                self._close(found[0])

    def forget(self, external_id: str) -> None:
        """After an erasure: close the sessions whose graph was built over the user."""
        with self._lock:
            for sid in [sid for sid, users in self._users.items() if external_id in users]:
                found = self._parties.pop(sid, None)
                self._users.pop(sid, None)
                if found is not None:
                    self._close(found[0])

    def close_all(self) -> None:
        """Stop every session's worker processes."""
        with self._lock:
            for party, _, _ in self._parties.values():
                self._close(party)
            self._parties.clear()
            self._users.clear()


def build(*, sessions: sessionmaker[Session], min_key_bits: int, epsilon_total: float, delta_total: float,
          allow_no_dp: bool) -> SocialService:
    """The social party's service over its stored links, with its lifetime budget (the registry's entry)."""
    budget = SocialBudget(epsilon_total=epsilon_total, delta_total=delta_total, allow_no_dp=allow_no_dp)
    return SocialService(sessions=sessions, min_key_bits=min_key_bits, budget=budget)

