"""A party's training data as it enters a differentially private run: randomized response, once per run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from services.crypto.interaction_dp import randomize_interactions, rating_levels
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.types import PartyData, RatingTriples

_RR_TAG = 0x5252  # separates the randomized-response stream from the party's other local streams
_PRIVATE_TAG = 0x505256  # the private users' block: a stream of its own


def training_data(data: PartyData, *, config: TrainConfig, local_seed: int) -> PartyData:
    """`data` with its training matrix randomized (ε = config.dp_epsilon) when DP is on, else unchanged.

    `local_seed` is the party's own randomness (never the run seed): the same run always gets the
    same randomized matrix, so a restarted party releases nothing new. The aligned users' block and
    the private users' block are randomized apart, by separate streams: the aligned block (what
    counts and gradients that leave the party are computed from) does not depend on the private one.
    """
    if config.dp_epsilon is None:
        return data
    epsilon = config.dp_epsilon
    # implicit feedback: a cell is absent or an interaction (binary response; the weights are not released)
    levels = np.ones(1, np.float32) if data.implicit else rating_levels(data.rating_min, data.rating_max)

    def randomized(t: RatingTriples, n_users: int, stream: list[int]) -> RatingTriples:
        u, i, r = randomize_interactions(users=t.users, items=t.items, ratings=t.ratings, n_users=n_users,
                                         n_items=data.n_items, levels=levels, epsilon=epsilon,
                                         rng=np.random.default_rng(stream))
        return RatingTriples(u.astype(np.int64), i.astype(np.int64), r)

    train = randomized(data.aligned("train"), data.n_users, [local_seed, _RR_TAG])
    if data.n_private:
        own = randomized(data.private("train"), data.n_private, [local_seed, _RR_TAG, _PRIVATE_TAG])
        train = RatingTriples(np.concatenate([train.users, own.users + data.n_users]),
                              np.concatenate([train.items, own.items]), np.concatenate([train.ratings, own.ratings]))
    return replace(data, train=train)
