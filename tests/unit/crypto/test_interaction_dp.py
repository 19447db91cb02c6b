"""Randomized response on a party's training matrix: the ε it claims, the frequencies it has, and the accountant."""

from __future__ import annotations

import itertools
import math
import tracemalloc

import numpy as np
import pytest

from services.crypto.interaction_dp import (
    absent_subset,
    expected_released,
    noise_parameter,
    randomize_interactions,
    rating_levels,
    require_budget,
    run_guarantee,
)
from services.errors import PrivacyBudgetExhausted

LEVELS = rating_levels(1.0, 5.0)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0, 8.0])
def test_accountant_gives_the_mechanisms_epsilon(eps: float) -> None:
    g = run_guarantee(epsilon=eps, buckets=6, delta=1e-6)
    assert eps - 1e-4 <= g.epsilon <= eps + 1e-9
    p, k = noise_parameter(eps, 6), 6
    assert math.log((1 - p + p / k) / (p / k)) == pytest.approx(eps)  # the closed form the module states
    assert math.isinf(run_guarantee(epsilon=None, buckets=6, delta=1e-6).epsilon)


def test_cell_frequencies_match_randomized_response() -> None:
    """One cell, many independent draws: P(keep) = 1 − p + p/k, every other value p/k; ratio ≤ e^ε."""
    eps, k, n = 1.0, 6, 40_000
    p = noise_parameter(eps, k)
    rng = np.random.default_rng(0)
    outcomes = {"present": np.zeros(k), "absent": np.zeros(k)}  # index 0..4: levels, 5: absent
    for start in ("present", "absent"):
        for _ in range(n // 400):  # 400 users × 1 item per call, all in the same state
            users = np.arange(400) if start == "present" else np.zeros(0, np.int64)
            u, _, r = randomize_interactions(users=users, items=np.zeros(users.size, np.int64),
                                             ratings=np.full(users.size, 4.0, np.float32), n_users=400, n_items=1,
                                             levels=LEVELS, epsilon=eps, rng=rng)
            counts = np.bincount(np.searchsorted(LEVELS, r), minlength=k)
            counts[5] = 400 - u.size
            outcomes[start] += counts
    present, absent = outcomes["present"] / n, outcomes["absent"] / n
    assert present[3] == pytest.approx(1 - p + p / k, abs=0.01) and present[5] == pytest.approx(p / k, abs=0.01)
    assert absent[5] == pytest.approx(1 - p + p / k, abs=0.01) and absent[3] == pytest.approx(p / k, abs=0.01)
    assert np.max(present / absent) <= math.exp(eps) * 1.1 and np.max(absent / present) <= math.exp(eps) * 1.1


def test_output_is_sorted_unique_cells_on_the_scale_and_reproducible() -> None:
    rng = np.random.default_rng(3)
    u, i, r = rng.integers(0, 30, 200), rng.integers(0, 20, 200), rng.uniform(1, 5, 200).astype(np.float32)

    def run() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return randomize_interactions(users=u, items=i, ratings=r, n_users=30, n_items=20, levels=LEVELS,
                                      epsilon=3.0, rng=np.random.default_rng(9))

    a, b = run(), run()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    cells = a[0] * 20 + a[1]
    assert np.all(np.diff(cells) > 0) and set(np.unique(a[2])) <= set(LEVELS.tolist())


def test_budget_refusal_names_the_figures() -> None:
    with pytest.raises(PrivacyBudgetExhausted) as err:
        require_budget(run_guarantee(epsilon=8.0, buckets=6, delta=1e-6), budget_epsilon=3.0, budget_delta=1e-5)
    assert err.value.http_status == 409 and err.value.extra["budget_epsilon"] == 3.0
    assert err.value.extra["epsilon_required"] == pytest.approx(8.0, abs=1e-4)
    require_budget(run_guarantee(epsilon=3.0, buckets=6, delta=1e-6), budget_epsilon=3.0, budget_delta=1e-5)


@pytest.mark.parametrize("size", [3, 4])  # 3: rejection sampling; 4: the complement is listed (dense)
def test_absent_subset_is_a_uniform_subset_of_the_complement(size: int) -> None:
    """Every `size`-subset of the 9 absent cells comes out equally often (the law of rng.choice on the complement)."""
    observed, total, n = np.array([2, 5, 7]), 12, 30_000
    rng = np.random.default_rng(1)
    complement = sorted(set(range(total)) - set(observed.tolist()))
    counts = dict.fromkeys(itertools.combinations(complement, size), 0)
    for _ in range(n):
        drawn = absent_subset(observed=observed, total=total, size=size, rng=rng)
        assert drawn.size == size and np.unique(drawn).size == size
        counts[tuple(sorted(drawn.tolist()))] += 1  # a KeyError here: an observed cell was drawn
    expected = n / len(counts)
    assert max(abs(c - expected) for c in counts.values()) < 5 * math.sqrt(expected)  # 5 sigma per subset


def test_sparse_matrix_cells_follow_the_exact_mechanism() -> None:
    """10 x 10 cells, 5 ratings, ε = 4 (the rejection-sampling regime): each cell's output law is k-ary RR."""
    eps, k, n = 4.0, 6, 6_000
    p = noise_parameter(eps, k)
    users, items = np.array([0, 1, 3, 3, 9]), np.array([0, 4, 2, 7, 9])
    ratings = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    rng = np.random.default_rng(5)
    counts = np.zeros((100, k))  # per cell: levels 0..4, index 5 absent
    for _ in range(n):
        u, i, r = randomize_interactions(users=users, items=items, ratings=ratings, n_users=10, n_items=10,
                                         levels=LEVELS, epsilon=eps, rng=rng)
        outcome = np.full(100, 5)
        outcome[u * 10 + i] = np.searchsorted(LEVELS, r)
        counts[np.arange(100), outcome] += 1
    exact = np.full((100, k), p / k)
    exact[:, 5] = 1 - p + p / k
    exact[users * 10 + items] = p / k
    exact[users * 10 + items, np.searchsorted(LEVELS, ratings)] = 1 - p + p / k
    sigma = np.sqrt(exact * (1 - exact) / n)
    assert np.all(np.abs(counts / n - exact) < 5 * sigma + 1e-9)
    released = counts[:, :5].sum() / n
    assert released == pytest.approx(expected_released(n_present=5, n_cells=100, levels=5, epsilon=eps), rel=0.02)


def test_a_huge_sparse_matrix_is_randomized_without_listing_its_cells() -> None:
    """200k users x 50k items (1e10 cells): the old complement alone would take 80 GB; here a few MB."""
    rng = np.random.default_rng(2)
    users, items = rng.integers(0, 200_000, 2_000), rng.integers(0, 50_000, 2_000)
    tracemalloc.start()
    try:
        u, i, _ = randomize_interactions(users=users, items=items, ratings=np.full(2_000, 3.0, np.float32),
                                         n_users=200_000, n_items=50_000, levels=LEVELS, epsilon=16.0, rng=rng)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20 and 0 < u.size < 2_000 + 10 * 1_000 and np.all(i < 50_000)
