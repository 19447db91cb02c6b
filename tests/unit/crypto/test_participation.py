"""Partial-participation estimator and participant selection."""

from __future__ import annotations

import numpy as np
import pytest

from services.crypto.participation import estimate_sum, participation_scale, select_participants

COUNTS = {"a": 100, "b": 300, "c": 50, "d": 550}


def test_scale() -> None:
    assert participation_scale(item_counts=COUNTS, participants=["a", "b"]) == 1000 / 400
    assert participation_scale(item_counts=COUNTS, participants=list(COUNTS)) == 1.0
    for bad in ([], ["a", "a"], ["z"]):
        with pytest.raises(ValueError):
            participation_scale(item_counts=COUNTS, participants=bad)


def test_exact_when_contributions_proportional_to_items() -> None:
    values = {p: np.full(3, 0.2 * m) for p, m in COUNTS.items()}
    est = estimate_sum(values, item_counts=COUNTS, participants=["c", "d"])
    np.testing.assert_allclose(est, sum(values.values()))


def test_unbiased_over_random_participants() -> None:
    """Per-item terms iid N(μ, 1): E[estimate] = μ·ΣM over participant draws and noise.

    Without the scale the mean would be about half the truth at α = 0.5.
    """
    rng = np.random.default_rng(7)
    mu, total_items, trials = 0.3, sum(COUNTS.values()), 3000
    estimates = []
    for _ in range(trials):
        values = {p: rng.normal(mu * m, np.sqrt(m), size=2) for p, m in COUNTS.items()}
        chosen = select_participants(list(COUNTS), rate=0.5, rng=rng)
        estimates.append(estimate_sum(values, item_counts=COUNTS, participants=chosen))
    mean = np.mean(estimates, axis=0)
    # observed per-trial std ≈ 53, so the mean's std ≈ 1.0: the tolerance is 5σ
    np.testing.assert_allclose(mean, mu * total_items, atol=5.0)


def test_select_participants() -> None:
    rng = np.random.default_rng(0)
    parties = ["p3", "p1", "p2", "p0"]
    picks = [select_participants(parties, rate=0.5, rng=rng) for _ in range(2000)]
    assert all(len(p) == 2 and p == sorted(p) and len(set(p)) == 2 for p in picks)
    freq = {name: sum(name in p for p in picks) / 2000 for name in parties}
    assert all(abs(f - 0.5) < 0.05 for f in freq.values())
    assert select_participants(parties, rate=0.01, rng=rng)  # at least one
    assert select_participants(parties, rate=1.0, rng=rng) == sorted(parties)
    with pytest.raises(ValueError):
        select_participants(parties, rate=0.0, rng=rng)


def test_integer_and_float32_inputs_keep_a_float_result() -> None:
    ints = {"a": np.array([1, 2]), "b": np.array([3, 4])}
    est = estimate_sum(ints, item_counts={"a": 1, "b": 2, "c": 1}, participants=["a", "b"])
    np.testing.assert_allclose(est, [4 * 4 / 3, 6 * 4 / 3])
    f32 = {"a": np.ones(2, np.float32)}
    assert estimate_sum(f32, item_counts={"a": 1, "b": 1}, participants=["a"]).dtype == np.float32
