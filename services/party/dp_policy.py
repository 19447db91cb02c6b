"""A party's own limits on whole-run DP: the smallest ε it accepts and the most ratings it will release.

The coordinator picks a run's ε; each party decides what it runs. Randomized response releases
about n_cells·p·L/k ratings that are noise (p grows as ε falls): a small ε turns a sparse
party into a dense one (time, memory and the released matrix itself). `configure` calls
`check_dp_request` before the party samples anything, so a refused run costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.config import PartySettings
from services.crypto.interaction_dp import expected_released, rating_levels
from services.db.party_tables import Interaction
from services.errors import PolicyRefused


@dataclass(frozen=True)
class DpPolicy:
    """PARTY_DP_MIN_EPSILON and PARTY_DP_MAX_RELEASED, and the party's number of rating levels (implicit: 1)."""

    min_epsilon: float
    max_released: int
    levels: int

    @classmethod
    def from_settings(cls, settings: PartySettings) -> DpPolicy:
        """The policy a party's settings state (its rating scale gives the number of levels)."""
        levels = 1 if settings.feedback == "implicit" else len(rating_levels(settings.rating_min, settings.rating_max))
        return cls(min_epsilon=settings.dp_min_epsilon, max_released=settings.dp_max_released, levels=levels)


def check_dp_request(*, policy: DpPolicy | None, epsilon: float | None, session: Session, n_users: int,
                     n_items: int) -> None:
    """Refuse (PolicyRefused, HTTP 403) a DP run below the party's ε floor or past its released-ratings cap.

    The cap is checked on the expected number of released ratings, from every rating this party
    holds (an upper bound on the aligned users' training ratings, and E grows with it), so the
    answer is the same for the same run and settings and is known before any sampling.
    """
    if policy is None or epsilon is None:
        return
    if epsilon < policy.min_epsilon:
        raise PolicyRefused(f"dp_epsilon={epsilon:g} is below this party's minimum {policy.min_epsilon:g} "
                            "(PARTY_DP_MIN_EPSILON)", extra={"field": "config.dp_epsilon",
                                                             "min_epsilon": policy.min_epsilon})
    n_present = int(session.scalar(select(func.count()).select_from(Interaction)) or 0)
    released = expected_released(n_present=n_present, n_cells=n_users * n_items, levels=policy.levels,
                                 epsilon=epsilon)
    if released > policy.max_released:
        raise PolicyRefused(f"dp_epsilon={epsilon:g} would release about {released:.3g} ratings from "
                            f"{n_users} users x {n_items} items, over this party's maximum {policy.max_released} "
                            "(PARTY_DP_MAX_RELEASED)", extra={"field": "config.dp_epsilon",
                                                              "expected_released": round(released),
                                                              "max_released": policy.max_released})
