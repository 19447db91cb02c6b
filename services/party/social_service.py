"""Social-party use cases behind the API: sessions over the party's stored social links (framework-free)."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from phe import PaillierPublicKey
from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased, sessionmaker

from services.crypto.paillier import EncryptedMatrix, PackedResult
from services.data.types import SocialLinks
from services.db.party_tables import PrivacyReservation, SocialLink, User
from services.errors import NotFound, PolicyRefused, PrivacyBudgetExhausted, ProtocolError
from services.party.social import SocialParty, SocialPartyConfig
from services.party.social_graph import adjacency_from_links
from services.party.social_paillier import paillier_social_party
from services.protocol.social import SocialSessionCreate, decode_users, unframe

MAX_SESSIONS = 8
MECHANISM = "social-products"
MECHANISM_NO_DP = "social-products-no-dp"


@dataclass(frozen=True)
class SocialBudget:
    """The social graph's lifetime privacy budget over all sessions (basic composition: ε and δ add up).

    Values come from PartySettings (social_epsilon_total, social_delta_total, social_allow_no_dp)."""

    epsilon_total: float
    delta_total: float
    allow_no_dp: bool


def reserved(session: Session) -> tuple[float, float]:
    """(ε, δ) reserved so far by sessions with DP."""
    eps, dlt = session.execute(
        select(func.coalesce(func.sum(PrivacyReservation.epsilon), 0.0),
               func.coalesce(func.sum(PrivacyReservation.delta), 0.0))
        .where(PrivacyReservation.mechanism == MECHANISM)).one()
    return float(eps), float(dlt)


def budget_summary(session: Session, budget: SocialBudget) -> dict[str, Any]:
    """Reserved and remaining (ε, δ) of the ledger, with one row per session."""
    rows = session.scalars(select(PrivacyReservation).order_by(PrivacyReservation.id)).all()
    eps, dlt = reserved(session)
    return {"epsilon_total": budget.epsilon_total, "delta_total": budget.delta_total,
            "epsilon_reserved": eps, "delta_reserved": dlt,
            "epsilon_remaining": max(0.0, budget.epsilon_total - eps),
            "delta_remaining": max(0.0, budget.delta_total - dlt),
            "noise_free_sessions_allowed": budget.allow_no_dp,
            "sessions": [{"session_id": r.session_id, "mechanism": r.mechanism, "epsilon": r.epsilon,
                          "delta": r.delta, "created_at": r.created_at.isoformat() if r.created_at else None}
                         for r in rows]}


def reserve(session: Session, *, budget: SocialBudget, session_id: str, epsilon: float, delta: float,
            dp_enabled: bool) -> None:
    """Add a session's (ε, δ) to the ledger, or refuse (403 noise-free not allowed, 409 budget spent)."""
    if not dp_enabled:
        if not budget.allow_no_dp:
            raise PolicyRefused("this social party does not serve noise-free products (dp_enabled=false)",
                                extra={"field": "dp_enabled"})
        session.add(PrivacyReservation(mechanism=MECHANISM_NO_DP, session_id=session_id, epsilon=0.0, delta=0.0))
        session.commit()
        return
    eps, dlt = reserved(session)
    if eps + epsilon > budget.epsilon_total + 1e-12 or dlt + delta > budget.delta_total + 1e-15:
        raise PrivacyBudgetExhausted(
            f"the social graph's lifetime budget cannot cover this session: ε {eps:g} of {budget.epsilon_total:g} "
            f"and δ {dlt:g} of {budget.delta_total:g} already reserved",
            extra={"epsilon_reserved": eps, "epsilon_total": budget.epsilon_total,
                   "epsilon_requested": epsilon, "delta_reserved": dlt, "delta_total": budget.delta_total,
                   "delta_requested": delta})
    session.add(PrivacyReservation(mechanism=MECHANISM, session_id=session_id, epsilon=epsilon, delta=delta))
    session.commit()


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
            if len(self._parties) >= MAX_SESSIONS:
                oldest = next(iter(self._parties))
                self._close(self._parties.pop(oldest)[0])
            self._parties[sid] = (party, public_key, threading.Lock())
        return sid, party

    @staticmethod
    def _close(party: SocialParty) -> None:
        ctx = getattr(party.engine, "ctx", None)
        if ctx is not None:
            ctx.close()

    def get(self, session_id: str) -> tuple[SocialParty, PaillierPublicKey, threading.Lock]:
        """The session's party, key and lock (operations on one session run one at a time), or NotFound."""
        with self._lock:
            found = self._parties.get(session_id)
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

    def backward(self, *, session_id: str, body: bytes) -> bytes:
        """Packed [(B L B^T) G W_P2^T + Z'] for the framed (users, [G]) body."""
        party, pk, lock = self.get(session_id)
        users, payload = unframe(body)
        grad = EncryptedMatrix.from_bytes(pk, payload)
        with lock:
            result = party.backward(users, grad)
        assert isinstance(result, PackedResult)
        return result.to_bytes()

    def update(self, *, session_id: str, body: bytes) -> None:
        """[X_B] += [dX_B] for the framed (users, [dX]) body."""
        party, pk, lock = self.get(session_id)
        users, payload = unframe(body)
        delta = EncryptedMatrix.from_bytes(pk, payload)
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

    def close_all(self) -> None:
        """Stop every session's worker processes."""
        with self._lock:
            for party, _, _ in self._parties.values():
                self._close(party)
            self._parties.clear()
