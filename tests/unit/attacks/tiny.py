"""A tiny two-party federation whose victim interactions are recoverable when nothing protects them."""

from __future__ import annotations

import numpy as np

from services.evaluation.harness import Federation
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.types import PartyData, RatingTriples

N_USERS, ATTACKER_ITEMS, VICTIM_ITEMS = 60, 30, 30

# D = 16 > 3 items per user, thd 1 (every rating is an edge); q = 0.2·N when the projection is on
TINY = TrainConfig(dim=16, layers=2, activation="identity", transform=False, optimizer="adam", lr=0.01, thd=1.0,
                   grad_scale=0.05, rounds=5, patience=5, seed=3)


def _triples(users: list[int], items: list[int], ratings: list[float]) -> RatingTriples:
    order = np.lexsort((np.array(items), np.array(users)))
    return RatingTriples(np.array(users, np.int64)[order], np.array(items, np.int64)[order],
                         np.array(ratings, np.float32)[order])


def tiny_federation(seed: int = 0) -> Federation:
    """60 users; each rates 1–3 of the victim's 30 items (always 5: same-signed errors) and 4 attacker items."""
    rng = np.random.default_rng(seed)
    vu, vi, au, ai, ar = [], [], [], [], []
    for u in range(N_USERS):
        for v in rng.choice(VICTIM_ITEMS, size=int(rng.integers(1, 4)), replace=False):
            vu.append(u)
            vi.append(int(v))
        for v in rng.choice(ATTACKER_ITEMS, size=4, replace=False):
            au.append(u)
            ai.append(int(v))
            ar.append(float(rng.integers(1, 6)))
    total = ATTACKER_ITEMS + VICTIM_ITEMS
    parties = [PartyData("party0", N_USERS, ATTACKER_ITEMS, total, _triples(au, ai, ar)),
               PartyData("party1", N_USERS, VICTIM_ITEMS, total, _triples(vu, vi, [5.0] * len(vu)))]
    mean = float(np.mean(ar + [5.0] * len(vu)))
    return Federation(parties, N_USERS, mean)
