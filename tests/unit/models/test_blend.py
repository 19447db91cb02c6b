"""The party's local EASE and its per-slice blend with the federated scores (models.ease, models.blend)."""

from __future__ import annotations

import numpy as np
import pytest

from models import blend, ease
from services.protocol.federation import pack_tree, unpack_tree


def _pairs(rng: np.random.Generator, n_users: int, n_items: int, per_user: int) -> tuple[np.ndarray, np.ndarray]:
    users = np.repeat(np.arange(n_users), per_user)
    # two tastes: even users like low items, odd users high ones, so EASE has structure to find
    half = n_items // 2
    items = np.where(users % 2 == 0, rng.integers(0, half, len(users)), rng.integers(half, n_items, len(users)))
    pairs = np.unique(np.stack([users, items], 1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def test_sparse_ease_scores_equal_the_dense_product() -> None:
    rng = np.random.default_rng(0)
    u, i = _pairs(rng, 60, 40, 8)
    cols, b_of = ease.weights_path(u, i, 40)
    model = ease.sparse(b_of(100.0), cols, 40, 100.0)
    x = np.zeros((60, 40))
    x[u, i] = 1.0
    hist = blend.histories(u, i, 60)
    np.testing.assert_allclose(model.scores(hist), x @ b_of(100.0), rtol=1e-4, atol=1e-5)
    assert np.all(np.diag(b_of(100.0)) == 0)


def test_kept_weights_are_the_largest_and_large_catalogues_model_the_most_interacted() -> None:
    rng = np.random.default_rng(1)
    u, i = _pairs(rng, 80, 30, 10)
    cols, b_of = ease.weights_path(u, i, 30)
    b = b_of(50.0)
    model = ease.sparse(b, cols, 30, 50.0, keep=5)
    row = model.data[model.indptr[3]:model.indptr[4]]
    assert len(row) == 5 and np.abs(row).min() >= np.sort(np.abs(b[3]))[-5] - 1e-6
    counts = np.bincount(i, minlength=30)
    chosen = ease.modelled_items(u, i, 30, max_items=10)
    assert len(chosen) == 10 and counts[chosen].min() >= np.sort(counts)[-10]


def _validation(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    seen = rng.random((n, m)) < 0.1
    relevant = (rng.random((n, m)) < 0.05) & ~seen
    relevant[np.arange(n), rng.integers(0, m, n)] = True
    return seen, relevant & ~seen


@pytest.mark.parametrize("good", ["federated", "local"])
def test_the_weight_follows_the_informative_score(good: str) -> None:
    rng = np.random.default_rng(2)
    seen, relevant = _validation(rng, 120, 50)
    signal, noise = relevant + 0.3 * rng.standard_normal(relevant.shape), rng.standard_normal(relevant.shape)
    fed, local = (signal, noise) if good == "federated" else (noise, signal)
    cell = blend.cells(np.ones(120, bool), np.full(120, 5))
    fitted, per_user = blend.fit_blend(fed, local, seen, relevant, cell)
    w = fitted.weights[0]
    assert (w <= 0.2) if good == "federated" else (w >= 0.8)
    assert fitted.slope[0] > 0  # calibrated log-odds rise with the blended score


def test_served_is_never_below_either_part_on_the_data_it_was_fitted_on() -> None:
    rng = np.random.default_rng(3)
    seen, relevant = _validation(rng, 200, 60)
    fed = relevant + 1.2 * rng.standard_normal(relevant.shape)
    local = relevant + 1.0 * rng.standard_normal(relevant.shape)
    aligned = rng.random(200) < 0.7
    cell = blend.cells(aligned, rng.integers(0, 6, 200))
    _, per_user = blend.fit_blend(fed, local, seen, relevant, cell)
    assert per_user["served"].mean() >= max(per_user["federated"].mean(), per_user["local"].mean()) - 1e-12


def test_a_cell_keeps_the_pooled_weight_unless_it_is_clearly_better() -> None:
    ndcg = np.zeros((40, 3))
    ndcg[:, 1] = 0.5
    ndcg[:, 2] = 0.5 + np.where(np.arange(40) % 2 == 0, 0.01, -0.0099)  # a mean gain of t < 2
    members = np.ones(40, bool)
    assert blend._choose(ndcg, members, prior=1) == 1
    ndcg[:, 2] = 0.6
    assert blend._choose(ndcg, members, prior=1) == 2
    assert blend._choose(ndcg, np.arange(40) < blend.MIN_USERS - 1, prior=1) == 1  # too few users


def test_local_ranking_round_trips_and_masks_history() -> None:
    rng = np.random.default_rng(4)
    u, i = _pairs(rng, 50, 30, 8)
    valid_u, valid_i = rng.integers(0, 50, 80), rng.integers(0, 30, 80)
    fed = rng.standard_normal((50, 30))
    model = blend.fit_local_ranking(n_users=50, n_items=30, train=(u, i),
                                    valid=(valid_u, valid_i, np.ones(80, bool)), aligned=np.arange(50) < 40,
                                    fed_rows=lambda rows: fed[rows], seed=0)
    again = blend.LocalRanking.from_tree(unpack_tree(pack_tree(model.to_tree())))
    hist = blend.histories(u, i, 50)
    a = model.served(fed, hist, np.arange(50) < 40)
    np.testing.assert_allclose(again.served(fed, hist, np.arange(50) < 40), a)
    assert np.isneginf(a[u, i]).all() and np.isfinite(a[~np.isneginf(a)]).all()
    one = again.served_user(None, hist[7], False)  # a user without a federated row: EASE alone
    assert np.isneginf(one[hist[7]]).all() and np.isfinite(one).sum() == 30 - len(hist[7])
