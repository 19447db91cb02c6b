"""Synthetic generator: determinism, sizes, scales, long tails, learnability, homophily, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from models.metrics import rmse
from services.data.synthetic import generate, oracle_predict
from services.data.types import Dataset, Ratings


def _all(ds: Dataset) -> Ratings:
    parts = [ds.train, ds.valid, ds.test] if ds.valid is not None else [ds.train, ds.test]
    return Ratings(
        *(
            np.concatenate([getattr(p, f) for p in parts])
            for f in ("user_ids", "item_ids", "ratings", "timestamps")
        )
    )


def test_deterministic_exact_and_distinct() -> None:
    a = generate(500, 200, 10_000, seed=11)
    b = generate(500, 200, 10_000, seed=11)
    c = generate(500, 200, 10_000, seed=12)
    ra, rb, rc = _all(a), _all(b), _all(c)
    assert len(ra) == 10_000 and (len(a.train), len(a.valid or []), len(a.test)) == (
        6000,
        2000,
        2000,
    )  # type: ignore[arg-type]
    assert np.array_equal(ra.user_ids, rb.user_ids) and np.array_equal(ra.ratings, rb.ratings)
    assert not np.array_equal(ra.item_ids, rc.item_ids)
    pairs = set(zip(ra.user_ids.tolist(), ra.item_ids.tolist()))
    assert len(pairs) == 10_000
    assert np.unique(ra.user_ids).size == 500  # every user rates at least once (min_user_ratings=1)
    assert (
        ra.user_ids.dtype.kind == "U"
        and ra.ratings.dtype == np.float32
        and ra.timestamps.dtype == np.int64
    )


def test_half_star_scale_like_filmtrust() -> None:
    ds = generate(300, 100, 5000, seed=1, rating_scale=(0.5, 4.0), rating_step=0.5)
    values = np.unique(_all(ds).ratings)
    assert set(values.tolist()) <= {0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0} and values.size >= 6
    assert (ds.rating_min, ds.rating_max) == (0.5, 4.0)


def test_long_tailed_activity_and_popularity() -> None:
    r = _all(generate(5000, 2000, 100_000, seed=2))
    users = np.sort(np.unique(r.user_ids, return_counts=True)[1])[::-1]
    items = np.sort(np.unique(r.item_ids, return_counts=True)[1])[::-1]
    # The top 10% of users/items hold far more than 10% of ratings (a uniform draw gives ~13%).
    assert users[: users.size // 10].sum() / users.sum() > 0.3
    assert items[: items.size // 10].sum() / items.sum() > 0.4
    assert np.median(users) < users.mean()


def _als(
    train: Ratings, n_users: int, n_items: int, dim: int, lam: float, iters: int
) -> tuple[np.ndarray, ...]:
    """Biased MF by alternating ridge regressions (the biases ride along as constant-1 columns)."""
    u = train.user_ids.astype(np.int64) - 1
    i = train.item_ids.astype(np.int64) - 1
    mu = float(train.ratings.mean())
    y = train.ratings.astype(np.float64) - mu
    rng = np.random.default_rng(0)
    p = np.hstack(
        [rng.normal(0, 0.1, (n_users, dim)), np.ones((n_users, 1)), np.zeros((n_users, 1))]
    )
    q = np.hstack(
        [rng.normal(0, 0.1, (n_items, dim)), np.zeros((n_items, 1)), np.ones((n_items, 1))]
    )
    by_user = [np.flatnonzero(u == k) for k in range(n_users)]
    by_item = [np.flatnonzero(i == k) for k in range(n_items)]
    for _ in range(iters):
        for rows, own, other, idx, free in (
            (by_user, p, q, i, [*range(dim), dim + 1]),
            (by_item, q, p, u, [*range(dim), dim]),
        ):
            for k, sel in enumerate(rows):
                if sel.size == 0:
                    continue
                x = other[idx[sel]][:, free]
                fixed = other[idx[sel]] @ own[k] - x @ own[k, free]
                own[k, free] = np.linalg.solve(
                    x.T @ x + lam * np.eye(len(free)), x.T @ (y[sel] - fixed)
                )
    return p, q, np.array(mu)


def test_signal_is_learnable_by_matrix_factorisation() -> None:
    ds = generate(600, 200, 30_000, seed=3, latent_dim=4)
    p, q, mu = _als(ds.train, 600, 200, dim=4, lam=5.0, iters=6)
    t = ds.test
    pred = float(mu) + np.sum(p[t.user_ids.astype(int) - 1] * q[t.item_ids.astype(int) - 1], axis=1)
    rmse_mf = rmse(np.clip(pred, 1, 5), t.ratings)
    rmse_mean = rmse(np.full_like(t.ratings, ds.train.ratings.mean()), t.ratings)
    rmse_oracle = rmse(oracle_predict(ds, t.user_ids, t.item_ids), t.ratings)
    assert rmse_oracle < rmse_mf < 0.85 * rmse_mean, (rmse_oracle, rmse_mf, rmse_mean)


def test_social_graph_is_homophilous_and_heavy_tailed() -> None:
    n = 4000
    ds = generate(n, 500, 40_000, seed=4, social=True, social_avg_degree=8)
    assert ds.social is not None
    src = ds.social.src.astype(np.int64) - 1
    dst = ds.social.dst.astype(np.int64) - 1
    assert src.size > 4 * n and not np.any(src == dst)
    assert np.unique(src * n + dst).size == src.size
    p = ds.meta["user_factors"]
    assert isinstance(p, np.ndarray)
    unit = p / np.linalg.norm(p, axis=1, keepdims=True)
    linked = np.mean(np.sum(unit[src] * unit[dst], axis=1))
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, n, 20_000), rng.integers(0, n, 20_000)
    random_pairs = np.mean(np.sum(unit[a] * unit[b], axis=1))
    assert linked > random_pairs + 0.15
    indeg = np.bincount(dst, minlength=n)
    outdeg = np.bincount(src, minlength=n)
    assert indeg.max() > 10 * np.median(indeg) and outdeg.max() > 8 * np.median(outdeg)
    no_social = generate(n, 500, 40_000, seed=4)
    assert no_social.social is None


def test_rejects_impossible_requests() -> None:
    with pytest.raises(ValueError, match="cannot place"):
        generate(100, 10, 50, seed=0, min_user_ratings=1)  # 100 users need >= 100 ratings
    with pytest.raises(ValueError, match="cannot place"):
        generate(10, 10, 90, seed=0)  # at most half the catalogue per user
    with pytest.raises(ValueError, match="rating scale"):
        generate(10, 10, 20, seed=0, rating_scale=(5, 1))


def test_medium_scale_is_fast() -> None:
    # CPU time, not wall time: the CI machine is shared, and a 10x-smaller run must stay cheap.
    start = time.process_time()
    ds = generate(200_000, 15_000, 700_000, seed=5, social=True)
    elapsed = time.process_time() - start
    assert len(ds.train) + len(ds.test) + len(ds.valid or []) == 700_000  # type: ignore[arg-type]
    assert ds.train.user_ids.dtype.itemsize <= 4 * 6  # ids stored narrow ('<U6'), not '<U21'
    assert elapsed < 10.0, elapsed
