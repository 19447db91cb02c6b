"""A VerFedGNN party's local ranking model: EASE on all of its users, blended with its federated scores."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.blend import LocalRanking, fit_local_ranking
from models.metrics import RELEVANT_THRESHOLD
from services.verfedgnn.types import PartyData


def fit_local(data: PartyData, *, fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> LocalRanking:
    """Fit the party's EASE and blend on its own train / validation split (aligned and private users).

    Relevant validation items are ratings ≥ 4 (SPEC §5); for an implicit party every interaction.
    """
    n = data.n_users + data.n_private
    train, valid = data.split("train"), data.split("valid")
    relevant = np.ones(len(valid), bool) if data.implicit else valid.ratings >= RELEVANT_THRESHOLD
    aligned = np.arange(n) < data.n_users
    return fit_local_ranking(n_users=n, n_items=data.n_items, train=(train.users, train.items),
                             valid=(valid.users, valid.items, relevant), aligned=aligned, fed_rows=fed_rows, seed=seed)
