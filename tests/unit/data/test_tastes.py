"""The taste-driven generator: seeded, and shaped like ML-100K (popularity Gini, per-user counts, stars)."""

from __future__ import annotations

import numpy as np
import pytest

from services.data.tastes import ML100K_STAR_SHARES, generate_tastes, gini
from services.data.types import Dataset
from tests.support.layout import DATA

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
# Measured from ml-100k/u.data (100,000 ratings, 943 users, 1682 items) on 26 Nov 2026; used when the
# data set is not beside the repository.
ML100K_ITEM_GINI = 0.6290
ML100K_USER_QUANTILES = (23.0, 33.0, 65.0, 148.0, 244.4)


def _ml100k() -> tuple[float, np.ndarray]:
    """(item popularity Gini, per-user count quantiles) of ML-100K: from u.data when present, else the constants."""
    path = DATA / "ml-100k" / "u.data"
    if not path.exists():
        return ML100K_ITEM_GINI, np.asarray(ML100K_USER_QUANTILES)
    rows = np.loadtxt(path, dtype=np.int64, usecols=(0, 1))
    return gini(np.bincount(rows[:, 1])[1:]), np.quantile(np.bincount(rows[:, 0])[1:], QUANTILES)


def _pairs(ds: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [ds.train, ds.valid, ds.test]
    return tuple(np.concatenate([getattr(p, f) for p in parts if p is not None])  # type: ignore[return-value]
                 for f in ("user_ids", "item_ids", "ratings"))


def test_gini_of_known_distributions() -> None:
    assert gini(np.ones(10)) == 0.0
    assert gini(np.array([0, 0, 0, 10])) == pytest.approx(0.75)


def test_seeded_distinct_pairs() -> None:
    a, b, c = (generate_tastes(200, 300, seed=s) for s in (3, 3, 4))
    ua, ia, ra = _pairs(a)
    assert np.array_equal(ua, _pairs(b)[0]) and np.array_equal(ia, _pairs(b)[1]) and np.array_equal(ra, _pairs(b)[2])
    assert not np.array_equal(ia, _pairs(c)[1])
    assert len(set(zip(ua.tolist(), ia.tolist()))) == ua.size  # no user rates an item twice
    assert np.unique(ua).size == 200 and np.bincount(ua.astype(np.int64)).max() <= int(0.45 * 300)


@pytest.mark.parametrize("seed", [0, 1])
def test_statistics_match_ml100k(seed: int) -> None:
    ml_gini, ml_quantiles = _ml100k()
    users, items, ratings = _pairs(generate_tastes(943, 1682, seed=seed))
    per_item = np.bincount(items.astype(np.int64), minlength=1683)[1:]
    per_user = np.bincount(users.astype(np.int64))[1:]
    assert abs(gini(per_item) - ml_gini) < 0.05, (gini(per_item), ml_gini)
    ratio = np.quantile(per_user, QUANTILES) / ml_quantiles
    assert np.all((ratio > 0.75) & (ratio < 1.33)), (np.quantile(per_user, QUANTILES), ml_quantiles)
    assert per_user.min() >= 20  # ML-100K keeps users with at least 20 ratings
    shares = np.bincount(ratings.astype(np.int64), minlength=6)[1:] / ratings.size
    assert np.allclose(shares, ML100K_STAR_SHARES, atol=0.005)


def test_tastes_drive_choices_and_ratings() -> None:
    """Chosen items lean toward the user's taste (none without taste_strength), and high stars even more."""
    def affinity(strength: float) -> tuple[float, float]:
        ds = generate_tastes(300, 400, seed=5, taste_strength=strength)
        users, items, ratings = _pairs(ds)
        p, q = ds.meta["user_factors"], ds.meta["item_factors"]
        assert isinstance(p, np.ndarray) and isinstance(q, np.ndarray)
        a = np.einsum("nd,nd->n", p[users.astype(np.int64) - 1], q[items.astype(np.int64) - 1])
        return float(a.mean()), float(a[ratings >= 4].mean() - a[ratings < 4].mean())
    chosen, liked = affinity(2.5)
    blind, _ = affinity(0.0)
    assert chosen > 0.5 and abs(blind) < 0.1 and liked > 0.3


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="min_count"):
        generate_tastes(10, 10, seed=0, min_count=0)
    with pytest.raises(ValueError, match="max_share"):
        generate_tastes(10, 10, seed=0, max_share=0.0)
