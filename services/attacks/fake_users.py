"""The de-anonymization attacker's preparation (VerFedGNN §4.1): fake users who each rate one victim item.

The attacking party registers users on the victim's platform too (so they survive PSI alignment);
each fake user rates exactly one of the victim's items, chosen among a share `share` of the
victim's catalogue. The attacker knows which item every fake user rated; the victim cannot tell
them from real customers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from services.evaluation.harness import Federation
from services.verfedgnn.types import PartyData, RatingTriples

FAKE_RATING = np.float32(5.0)  # above every edge threshold, so each fake rating is a graph edge


@dataclass(frozen=True)
class FakeUsers:
    """Who the fake users are (aligned user indices) and the victim item each of them rated."""

    victim: str
    users: np.ndarray  # int64 (F,): aligned user index of each fake user
    items: np.ndarray  # int64 (F,): victim-local index of the one item fake user j rated
    n_honest: int  # users 0..n_honest-1 are honest, the fake ones come after


def _grow(data: PartyData, n_users: int, extra: RatingTriples | None) -> PartyData:
    """The same party over more aligned users, with `extra` training ratings appended."""
    train = data.train
    if extra is not None:
        train = RatingTriples(np.concatenate([train.users, extra.users]), np.concatenate([train.items, extra.items]),
                              np.concatenate([train.ratings, extra.ratings]))
    return replace(data, n_users=n_users, train=train)


def with_fake_users(fed: Federation, *, victim: str, share: float, rng: np.random.Generator) -> tuple[Federation, FakeUsers]:
    """Add one fake user per attacked victim item (a random `share` of the victim's items).

    The fake users get the indices after the honest ones (so every split stays sorted by user)
    and rate their item FAKE_RATING in the training split; the other parties hold no rating of
    theirs. The global mean is recomputed over all training ratings, as the coordinator would.
    """
    if not 0.0 < share <= 1.0:
        raise ValueError("share must lie in (0, 1]")
    target = next(p for p in fed.parties if p.party_id == victim)
    n_fake = max(1, round(share * target.n_items))
    items = np.sort(rng.choice(target.n_items, size=n_fake, replace=False)).astype(np.int64)
    users = np.arange(fed.n_users, fed.n_users + n_fake, dtype=np.int64)
    n_users = fed.n_users + n_fake
    extra = RatingTriples(users, items, np.full(n_fake, FAKE_RATING, dtype=np.float32))
    parties = [_grow(p, n_users, extra if p.party_id == victim else None) for p in fed.parties]
    total = sum(float(p.train.ratings.sum()) for p in parties)
    count = sum(len(p.train) for p in parties)
    return Federation(parties, n_users, total / count), FakeUsers(victim, users, items, fed.n_users)


def truth_pairs(data: PartyData, *, n_honest: int, thd: float) -> set[tuple[int, int]]:
    """The victim's interactions the attacks try to infer: honest users' training edges (rating ≥ thd)."""
    t = data.train
    keep = (t.ratings >= thd) & (t.users < n_honest)
    return set(zip(t.users[keep].tolist(), t.items[keep].tolist()))
