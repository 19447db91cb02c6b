"""Randomized response on a party's training matrix: the ε it claims, the frequencies it has, and the accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.crypto.interaction_dp import (
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
