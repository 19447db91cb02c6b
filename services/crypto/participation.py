"""Partial participation (VerFedGNN §4.4): estimate a sum over all parties from a subset.

With participants A_t in round t, Σ_p c_p is estimated as

    (Σ_i M_i / Σ_{p ∈ A_t} M_p) · Σ_{p ∈ A_t} c_p,

M_p being party p's item count.  The estimate is exact when c_p ∝ M_p and unbiased when
each item contributes an independent term with a common mean (E[c_p] = μ·M_p), whatever
A_t is.  It reveals nothing beyond the participants' own contributions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def participation_scale(*, item_counts: Mapping[str, int], participants: Sequence[str]) -> float:
    """Scale Σ_all M_i / Σ_{p∈A_t} M_p of the partial-participation estimator.

    Args:
        item_counts: M_p for every party of the federation.
        participants: A_t; distinct names, each a key of ``item_counts``.

    Returns:
        The factor (≥ 1) that multiplies the participants' sum.
    """
    if not participants:
        raise ValueError("at least one participant is required")
    if len(set(participants)) != len(participants):
        raise ValueError("participants must be distinct")
    unknown = [p for p in participants if p not in item_counts]
    if unknown:
        raise ValueError(f"unknown participants: {unknown}")
    if any(m < 0 for m in item_counts.values()):
        raise ValueError("item counts must be non-negative")
    part = sum(item_counts[p] for p in participants)
    if part <= 0:
        raise ValueError("participants hold no items")
    return sum(item_counts.values()) / part


def estimate_sum(
    values: Mapping[str, np.ndarray],
    *,
    item_counts: Mapping[str, int],
    participants: Sequence[str],
) -> np.ndarray:
    """Estimate Σ over all parties of c_p from the participants' values.

    Args:
        values: c_p for (at least) every participant; equal shapes.
        item_counts: M_p for every party.
        participants: A_t.

    Returns:
        scale · Σ_{p∈A_t} values[p] (float64 unless the inputs are float32).
    """
    scale = participation_scale(item_counts=item_counts, participants=participants)
    missing = [p for p in participants if p not in values]
    if missing:
        raise ValueError(f"no values from participants {missing}")
    total: np.ndarray = np.sum([np.asarray(values[p]) for p in participants], axis=0)
    dtype = np.result_type(total.dtype, np.float32)  # integer inputs give float64
    return np.asarray(total * np.asarray(scale, dtype=dtype), dtype=dtype)


def select_participants(parties: Sequence[str], *, rate: float, rng: np.random.Generator) -> list[str]:
    """Uniformly draw A_t: max(1, round(rate·P)) distinct parties, returned sorted.

    Args:
        parties: every party of the federation (distinct).
        rate: participation rate α in (0, 1].
        rng: source of the draw.
    """
    if not 0.0 < rate <= 1.0 or not math.isfinite(rate):
        raise ValueError("rate must lie in (0, 1]")
    if not parties or len(set(parties)) != len(parties):
        raise ValueError("parties must be a non-empty sequence of distinct names")
    k = min(len(parties), max(1, round(rate * len(parties))))
    chosen = rng.choice(len(parties), size=k, replace=False)
    return sorted(parties[int(i)] for i in chosen)
