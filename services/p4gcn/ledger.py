"""The social graph's lifetime privacy ledger: (ε, δ) reserved per session in the party database.

A session reserves its whole (ε, δ) before it exists, so a refused session serves nothing and the
budget survives restarts. Basic composition: the ε and δ of all sessions add up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.db.party_tables import PrivacyReservation
from services.errors import PolicyRefused, PrivacyBudgetExhausted

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
