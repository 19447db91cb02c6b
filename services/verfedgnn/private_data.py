"""A party's training data as it enters a differentially private run: randomized response, once per run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from services.crypto.interaction_dp import randomize_interactions, rating_levels
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.types import PartyData, RatingTriples

_RR_TAG = 0x5252  # separates the randomized-response stream from the party's other local streams


def training_data(data: PartyData, *, config: TrainConfig, local_seed: int) -> PartyData:
    """`data` with its training matrix randomized (ε = config.dp_epsilon) when DP is on, else unchanged.

    `local_seed` is the party's own randomness (never the run seed): the same run always gets the
    same randomized matrix, so a restarted party releases nothing new.
    """
    if config.dp_epsilon is None:
        return data
    tr = data.train
    # implicit feedback: a cell is absent or an interaction (binary response; the weights are not released)
    levels = np.ones(1, np.float32) if data.implicit else rating_levels(data.rating_min, data.rating_max)
    u, i, r = randomize_interactions(users=tr.users, items=tr.items, ratings=tr.ratings, n_users=data.n_users,
                                     n_items=data.n_items, levels=levels,
                                     epsilon=config.dp_epsilon, rng=np.random.default_rng([local_seed, _RR_TAG]))
    return replace(data, train=RatingTriples(u.astype(np.int64), i.astype(np.int64), r))
