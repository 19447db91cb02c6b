"""What a party serves in the harness: its federated scores blended with its local EASE (`models.blend`).

The same fit the party runs at publish (`services.verfedgnn.local.fit_local`), then each user's served
row over the test protocol's candidates (history = train ∪ validation, as the served model knew).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from models.blend import LocalRanking, SliceFigures, histories
from services.verfedgnn.local import fit_local
from services.verfedgnn.types import PartyData


@dataclass(frozen=True)
class Served:
    """A party's served (N, M) log-odds, its local EASE scores and its validation figures per slice."""

    scores: np.ndarray
    local: np.ndarray
    figures: list[SliceFigures]
    model: LocalRanking


def served_scores(data: PartyData, fed: np.ndarray, *, seed: int) -> Served:
    """Fit the party's local model on its split and score every user (rows as `fed`: aligned then private)."""
    model = fit_local(data, fed_rows=lambda rows: fed[rows], seed=seed)
    n = data.n_users + data.n_private
    t, v = data.split("train"), data.split("valid")
    history = histories(np.concatenate([t.users, v.users]), np.concatenate([t.items, v.items]), n)
    aligned = np.arange(n) < data.n_users
    scores = model.served(fed[:n], history, aligned)
    local = model.ease.scores(history)
    return Served(scores, local, model.figures, model)


def served_all(parties: Mapping[str, PartyData], fed: Mapping[str, np.ndarray], *, seed: int) -> dict[str, Served]:
    """`served_scores` of every party."""
    return {p: served_scores(parties[p], fed[p], seed=seed) for p in sorted(parties)}
