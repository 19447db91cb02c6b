"""Synthetic interaction data shaped like real data: users choose items by popularity and by taste.

Unlike `synthetic.generate` (items drawn by popularity alone, taste only in the rating value), here a
user's latent taste decides *which* items they rate as well as how high, as on MovieLens: that is what
makes a user's choices in one catalogue predict their choices in another (the reason to federate).

The draw, all seeded by `seed`:
- item popularity: Zipf, weight rank^-`popularity_exponent` over items ranked at random;
- tastes: user factors p_u and item factors q_i ~ N(0, I/√d) in `latent_dim` dimensions, so <p_u, q_i> has
  unit variance; every item of every party lives in the same taste space;
- per-user counts: lognormal (log-median `count_log_median`, log-sd `count_log_sigma`) truncated below at
  `min_count` (redrawn, as a data set that keeps users with ≥ `min_count` ratings) and capped at
  `max_share` of the catalogue;
- choices: user u rates the `count_u` items with the largest log w_i + `taste_strength`·<p_u, q_i> + Gumbel
  noise, i.e. a draw without replacement ∝ w_i·exp(taste_strength·<p_u, q_i>);
- ratings: the score `rating_taste`·<p_u, q_i> + `rating_popularity`·z(log w_i) + b_u + N(0, `rating_noise`²),
  b_u ~ N(0, `user_bias`²), is cut into stars at the quantiles of `star_shares` (default: ML-100K's shares of
  1..5 stars), the levels spread evenly over `rating_scale`.
The defaults were fitted to ML-100K (943 users, 1682 items): item popularity Gini 0.63 and per-user count
quantiles 23/33/65/148/244 at 10/25/50/75/90 % (tests/unit/data/test_tastes.py holds them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.data.splits import random_split
from services.data.synthetic import external_ids
from services.data.types import Dataset, Ratings

# ML-100K's shares of 1, 2, 3, 4 and 5 stars (u.data, 100,000 ratings).
ML100K_STAR_SHARES = (0.0611, 0.1137, 0.2715, 0.3417, 0.2120)
_T0 = 1_500_000_000  # timestamps: one year of seconds from mid-2017, as synthetic.generate
_CELLS = 1 << 22  # dense user × item cells per chunk of the choice draw


def gini(counts: np.ndarray) -> float:
    """Gini coefficient of non-negative counts (0: all equal; → 1: one entity holds everything)."""
    x = np.sort(np.asarray(counts, dtype=np.float64))
    n = x.size
    return float((2 * np.arange(1, n + 1) - n - 1) @ x / (n * x.sum())) if n and x.sum() > 0 else 0.0


def user_counts(n_users: int, n_items: int, rng: np.random.Generator, *, log_median: float, log_sigma: float,
                minimum: int, max_share: float) -> np.ndarray:
    """Lognormal interaction counts, redrawn below `minimum`, capped at `max_share` of the catalogue."""
    cap = max(1, min(n_items, int(max_share * n_items)))
    minimum = min(minimum, cap)
    out = np.rint(rng.lognormal(log_median, log_sigma, n_users))
    for _ in range(100):  # each pass redraws the short ones; P(short) < 1, so this ends quickly
        short = out < minimum
        if not short.any():
            break
        out[short] = np.rint(rng.lognormal(log_median, log_sigma, int(short.sum())))
    return np.clip(out, minimum, cap).astype(np.int64)


def choose(counts: np.ndarray, log_weight: np.ndarray, p: np.ndarray, q: np.ndarray, strength: float,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(users, items): each user's `counts[u]` distinct items, drawn ∝ w_i·exp(strength·<p_u, q_i>) (Gumbel top-k)."""
    n_users, n_items = counts.size, log_weight.size
    step = max(1, _CELLS // n_items)
    users, items = [], []
    for s in range(0, n_users, step):
        keys = log_weight + strength * (p[s:s + step] @ q.T) + rng.gumbel(size=(min(step, n_users - s), n_items))
        order = np.argsort(-keys, axis=1)
        take = np.arange(n_items) < counts[s:s + step, None]
        users.append(np.nonzero(take)[0] + s)
        items.append(order[take])
    return np.concatenate(users).astype(np.int64), np.concatenate(items).astype(np.int64)


def stars(score: np.ndarray, shares: Sequence[float], scale: tuple[float, float]) -> np.ndarray:
    """Cut scores into len(shares) levels at their quantiles (lowest share → lowest level), levels spread over scale."""
    cum = np.cumsum(np.asarray(shares, dtype=np.float64))
    cuts = np.quantile(score, cum[:-1] / cum[-1])
    levels = np.linspace(scale[0], scale[1], len(shares))
    return levels[np.searchsorted(cuts, score, side="right")].astype(np.float32)


def generate_tastes(
    n_users: int = 943,
    n_items: int = 1682,
    *,
    seed: int,
    latent_dim: int = 8,
    popularity_exponent: float = 2.2,
    taste_strength: float = 2.5,
    count_log_median: float = 3.63,
    count_log_sigma: float = 1.32,
    min_count: int = 20,
    max_share: float = 0.45,
    rating_taste: float = 1.0,
    rating_popularity: float = 0.15,
    user_bias: float = 0.4,
    rating_noise: float = 0.6,
    star_shares: Sequence[float] = ML100K_STAR_SHARES,
    rating_scale: tuple[float, float] = (1.0, 5.0),
    ratios: Sequence[float] = (0.6, 0.2, 0.2),
    name: str = "synthetic-tastes",
) -> Dataset:
    """A seeded data set whose choices and ratings follow popularity and shared latent tastes, split train/valid/test."""
    if min(n_users, n_items, latent_dim, min_count) < 1 or len(star_shares) < 2:
        raise ValueError("n_users, n_items, latent_dim and min_count must be >= 1, and star_shares has >= 2 levels")
    if not rating_scale[0] < rating_scale[1] or not 0 < max_share <= 1:
        raise ValueError(f"bad rating scale {rating_scale} or max_share {max_share}")
    rng = np.random.default_rng(seed)
    sigma = latent_dim ** -0.25  # <p_u, q_i> then has unit variance
    p = rng.standard_normal((n_users, latent_dim)) * sigma
    q = rng.standard_normal((n_items, latent_dim)) * sigma
    log_w = -popularity_exponent * np.log(rng.permutation(n_items) + 1.0)
    counts = user_counts(n_users, n_items, rng, log_median=count_log_median, log_sigma=count_log_sigma,
                         minimum=min_count, max_share=max_share)
    users, items = choose(counts, log_w, p, q, taste_strength, rng)
    perm = rng.permutation(users.size)  # rows in random order, not grouped by user
    users, items = users[perm], items[perm]
    z_pop = (log_w - log_w.mean()) / (log_w.std() or 1.0)
    bu = rng.standard_normal(n_users) * user_bias
    score = (rating_taste * np.einsum("nd,nd->n", p[users], q[items]) + rating_popularity * z_pop[items]
             + bu[users] + rng.standard_normal(users.size) * rating_noise)
    lo, hi = (float(x) for x in rating_scale)
    user_ids, item_ids = external_ids(n_users), external_ids(n_items)
    ratings = Ratings(user_ids[users], item_ids[items], stars(score, star_shares, (lo, hi)),
                      _T0 + rng.integers(0, 365 * 86_400, users.size, dtype=np.int64))
    train, valid, test = random_split(ratings, ratios, rng)
    meta: dict[str, object] = {"seed": seed, "latent_dim": latent_dim, "user_factors": p, "item_factors": q,
                               "item_log_weight": log_w, "user_counts": counts}
    return Dataset(name, train, test, valid, rating_min=lo, rating_max=hi, meta=meta)
