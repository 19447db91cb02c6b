"""Interaction-level differential privacy of a party's training data: randomized response, and its accountant.

Neighbouring relation: two data sets of one party differ in ONE user–item cell of its training
matrix: an interaction added or removed (absent ↔ a rating) or its rating changed. Every cell of
the N × M_p matrix takes one of k = 1 + L values (absent, or one of the L rating levels of the
public rating scale). The mechanism, applied once per run before anything leaves the party:
each cell independently, with probability p, is replaced by a value drawn uniformly from all k
values (else it keeps its own). That is k-ary randomized response with
    ε = ln((1 − p + p/k) / (p/k)),   i.e.   p = k / (e^ε + k − 1),
pure ε-DP per cell, hence for the whole released matrix (cells are disjoint: parallel
composition). Everything the party sends afterwards (counts, projections, gradients, loss and
training error sums, in every round) is computed from the randomized matrix and from messages
that are themselves post-processing of it, so the whole run keeps the same ε, whatever the number
of rounds and layers. The accountant (`run_guarantee`) composes the run's mechanisms with
dp_accounting's PLD accountant (REPLACE_ONE), the relation above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_privacy_accountant

from services.errors import PrivacyBudgetExhausted


def noise_parameter(epsilon: float, buckets: int) -> float:
    """p: the probability that a cell is redrawn uniformly over all `buckets` values, for ε."""
    if epsilon <= 0 or buckets < 2:
        raise ValueError("epsilon must be positive and there must be at least two values per cell")
    return buckets / (math.exp(epsilon) + buckets - 1)


def rating_levels(rating_min: float, rating_max: float, step: float = 1.0) -> np.ndarray:
    """The public rating scale: rating_min, rating_min + step, …, rating_max."""
    n = int(round((rating_max - rating_min) / step)) + 1
    return (rating_min + step * np.arange(n)).astype(np.float32)


def expected_released(*, n_present: int, n_cells: int, levels: int, epsilon: float) -> float:
    """Expected number of ratings the mechanism releases from `n_present` ratings in `n_cells` cells.

    A present cell stays a rating with probability 1 − p + p·L/k, an absent one becomes a rating with
    p·L/k, so E = n_present·(1 − p) + n_cells·p·L/k (increasing in n_present: an upper bound on the
    ratings gives an upper bound on E).
    """
    p = noise_parameter(epsilon, levels + 1)
    return n_present * (1 - p) + n_cells * p * levels / (levels + 1)


def absent_subset(*, observed: np.ndarray, total: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random `size`-subset of [0, total) minus the sorted unique `observed`, unsorted.

    Memory O(size + |observed|) whatever `total`: candidates are drawn uniformly from [0, total) in
    batches and taken in draw order when neither observed nor already taken. That is sequential
    rejection sampling, whose result is a uniform subset of the complement (the law of
    `rng.choice(complement, size, replace=False)`). While the complement is at least half of the
    cells each draw is accepted with probability ≥ 1/2; when the subset and the observed cells
    exceed half of all cells, the complement is small (< 2·(size + |observed|)), so it is listed.
    """
    if size <= 0:
        return np.zeros(0, np.int64)
    if 2 * (size + observed.size) > total:  # dense: listing the complement costs O(released) anyway
        absent = np.setdiff1d(np.arange(total, dtype=np.int64), observed, assume_unique=True)
        return rng.choice(absent, size=size, replace=False)
    taken = np.zeros(0, np.int64)
    while taken.size < size:
        need = size - taken.size
        batch = rng.integers(0, total, size=need + need // 2 + 16, dtype=np.int64)
        hit = np.searchsorted(observed, batch)
        batch = batch[~((hit < observed.size) & (observed[np.minimum(hit, observed.size - 1)] == batch))]
        _, first = np.unique(batch, return_index=True)  # first draw of each value, kept in draw order
        batch = batch[np.sort(first)]
        batch = batch[~np.isin(batch, taken)]
        taken = np.concatenate([taken, batch[:need]])
    return taken


def randomize_interactions(
    *, users: np.ndarray, items: np.ndarray, ratings: np.ndarray, n_users: int, n_items: int, levels: np.ndarray,
    epsilon: float, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-ary randomized response on every cell of the (n_users × n_items) rating matrix.

    Present cells (duplicates: the last rating wins) are snapped to the nearest level; each cell is
    redrawn with probability p uniformly among {absent} ∪ levels. Absent cells are handled in
    bulk, never listed: how many become ratings is Binomial(#absent, p·L/k), which ones a uniform
    subset of the absent cells (`absent_subset`), each with a uniform level. Memory is
    O(ratings in + ratings out), independent of n_users × n_items. Returns (users, items, ratings)
    sorted by cell.
    """
    k = len(levels) + 1
    p = noise_parameter(epsilon, k)
    cells = np.asarray(users, np.int64) * n_items + np.asarray(items, np.int64)
    order = np.argsort(cells, kind="stable")
    cells, vals = cells[order], np.asarray(ratings, np.float64)[order]
    last = np.r_[cells[1:] != cells[:-1], True] if cells.size else np.zeros(0, bool)
    cells, vals = cells[last], vals[last]
    level_idx = np.abs(vals[:, None] - levels[None, :].astype(np.float64)).argmin(axis=1)
    # present cells: redraw with probability p over k values (index L = absent)
    redraw = rng.random(cells.size) < p
    drawn = rng.integers(0, k, size=cells.size)
    new_idx = np.where(redraw, drawn, level_idx)
    keep = new_idx < len(levels)
    kept_cells, kept_vals = cells[keep], levels[new_idx[keep]]
    # absent cells: Binomial(#absent, p·L/k) become ratings, a uniform subset of them, uniform levels
    total = n_users * n_items
    n_absent = total - cells.size
    n_new = int(rng.binomial(n_absent, p * len(levels) / k)) if n_absent > 0 else 0
    if n_new:
        new_cells = absent_subset(observed=cells, total=total, size=n_new, rng=rng)
        new_vals = levels[rng.integers(0, len(levels), size=n_new)]
        kept_cells = np.concatenate([kept_cells, new_cells])
        kept_vals = np.concatenate([kept_vals, new_vals])
    out = np.argsort(kept_cells, kind="stable")
    kept_cells, kept_vals = kept_cells[out], kept_vals[out]
    return kept_cells // n_items, kept_cells % n_items, kept_vals.astype(np.float32)


@dataclass(frozen=True)
class RunGuarantee:
    """The (ε, δ) of a whole run for one interaction at one party, and how it was composed."""

    epsilon: float
    delta: float
    mechanism: str
    unit: str = "one user-item interaction (its presence and rating) held by one party"

    def as_record(self) -> dict[str, object]:
        """JSON-safe figures for the run record (ε = null means no guarantee)."""
        return {"epsilon": self.epsilon if math.isfinite(self.epsilon) else None, "delta": self.delta,
                "mechanism": self.mechanism, "unit": self.unit,
                "neighbouring_relation": "replace one cell of a party's user x item training matrix "
                                         "(add, remove or change one interaction)"}


def run_guarantee(*, epsilon: float | None, buckets: int, delta: float) -> RunGuarantee:
    """Compose the run's mechanisms (one randomized response per party; parallel across parties) with PLD."""
    if epsilon is None:
        return RunGuarantee(math.inf, delta, "none: no differential privacy")
    accountant = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=1e-6)  # the default 1e-4 overstates small ε by ~1e-4
    accountant.compose(dp_accounting.RandomizedResponseDpEvent(noise_parameter(epsilon, buckets), buckets))
    eps = float(accountant.get_epsilon(delta))
    return RunGuarantee(eps, delta, f"{buckets}-ary randomized response on the training matrix, once per run "
                                    f"(p = {noise_parameter(epsilon, buckets):.6g}); every message is post-processing")


def require_budget(guarantee: RunGuarantee, *, budget_epsilon: float, budget_delta: float) -> None:
    """Refuse (PrivacyBudgetExhausted, HTTP 409) a run whose whole-run guarantee does not fit the budget."""
    if not guarantee.epsilon <= budget_epsilon * (1 + 1e-9) or guarantee.delta > budget_delta:
        raise PrivacyBudgetExhausted(
            f"the run would spend epsilon={guarantee.epsilon:g} at delta={guarantee.delta:g}, over its budget "
            f"(epsilon={budget_epsilon:g}, delta={budget_delta:g})",
            extra={"epsilon_required": guarantee.epsilon if math.isfinite(guarantee.epsilon) else None,
                   "delta": guarantee.delta, "budget_epsilon": budget_epsilon, "budget_delta": budget_delta,
                   "mechanism": guarantee.mechanism})
