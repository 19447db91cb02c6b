"""Gradient attack (VerFedGNN App. J.4): whose fake users' gradients add up to an honest user's.

The observer is whoever receives the victim's gradient upload per party: today the coordinator,
colluding with the attacking party that tells it which item each fake user rated. Each honest
user's user-embedding gradient row is compared with sums of at most three fake users' rows, both
normalised to [−1, 1] (as the paper does for quantized gradients); the inferred items are the
fake users' items of the closest subset.
"""

from __future__ import annotations

import numpy as np

from services.attacks.fake_users import FakeUsers
from services.attacks.scoring import Pairs
from services.attacks.search import max_normalized, subset_search


def gradient_attack(rows: np.ndarray, fake: FakeUsers, *, honest: np.ndarray, max_items: int = 3,
                    beam: int = 8) -> Pairs:
    """Guessed (user, victim item) pairs from the victim's (N, D) user-embedding gradient rows."""
    subsets = subset_search(rows[honest], rows[fake.users], combine=max_normalized, target_transform=max_normalized,
                            max_items=max_items, beam=beam)
    return {(int(u), int(fake.items[j])) for u, s in zip(honest.tolist(), subsets) for j in s.tolist()}
