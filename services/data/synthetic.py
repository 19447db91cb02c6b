"""Deterministic synthetic ratings: latent factors, long tails, optional homophilous social graph.

Ratings follow r = mu + b_u + b_i + <p_u, q_i> + noise on a 5-star reference scale, are mapped
linearly onto `rating_scale` and rounded to `rating_step`. The true parameters (on the output
scale) are kept in `Dataset.meta` so tests and benchmarks can compare a model with the oracle.
User k has id str(k + 1), item j has id str(j + 1). Everything is vectorised numpy, so ~2M users /
150k items / 7M ratings take well under a minute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from services.data.splits import random_split
from services.data.types import Dataset, Ratings, SocialLinks

_CHUNK = 1_000_000
_T0 = 1_500_000_000  # timestamps: one year of seconds from mid-2017


def zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Power-law weights (rank^-exponent) over n entities, ranks assigned at random; sums to 1."""
    ranks = rng.permutation(n).astype(np.float64) + 1.0
    w = ranks ** -float(exponent)
    return w / w.sum()


def activity_counts(
    n: int, total: int, weights: np.ndarray, *, minimum: int, cap: int, rng: np.random.Generator
) -> np.ndarray:
    """Counts summing to `total`: `minimum` each plus a multinomial draw by weight, capped."""
    if total < n * minimum or total > n * cap:
        raise ValueError(
            f"cannot place {total} ratings over {n} users with {minimum}..{cap} ratings each"
        )
    counts = np.full(n, minimum, dtype=np.int64) + rng.multinomial(total - n * minimum, weights)
    # Redistribute the excess of capped users over the others until every count fits.
    while (over := np.maximum(counts - cap, 0)).any():
        counts -= over
        room = np.where(counts < cap, weights, 0.0)
        counts += rng.multinomial(int(over.sum()), room / room.sum())
    return counts


def sample_pairs(
    user_counts: np.ndarray,
    item_weights: np.ndarray,
    rng: np.random.Generator,
    *,
    max_rounds: int = 60,
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (user, item) pairs: user u appears user_counts[u] times, items by popularity."""
    n_items = item_weights.size
    users = np.repeat(np.arange(user_counts.size, dtype=np.int64), user_counts)

    def draw(k: int, uniform: bool) -> np.ndarray:
        if uniform:
            return rng.integers(0, n_items, k, dtype=np.int64)
        return weighted_draw(item_weights, k, rng)

    items = draw(users.size, uniform=False)
    for round_no in range(max_rounds):
        key = users * n_items + items
        order = np.argsort(key, kind="stable")
        sk = key[order]
        dup = order[1:][sk[1:] == sk[:-1]]
        if dup.size == 0:
            return users, items
        # Popularity sampling first; uniform later so very active users still find fresh items.
        items[dup] = draw(dup.size, uniform=round_no >= 3)
    raise RuntimeError(
        "could not draw distinct (user, item) pairs; lower n_ratings or user activity skew"
    )


def weighted_draw(weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k i.i.d. indices drawn by weight (multinomial counts then a shuffle: O(k), no search)."""
    counts = rng.multinomial(k, weights / weights.sum())
    return rng.permutation(np.repeat(np.arange(weights.size, dtype=np.int64), counts))


def _scores(
    users: np.ndarray,
    items: np.ndarray,
    p: np.ndarray,
    q: np.ndarray,
    bu: np.ndarray,
    bi: np.ndarray,
) -> np.ndarray:
    """b_u + b_i + <p_u, q_i> row by row, in chunks to bound the gather memory."""
    out = np.empty(users.size, dtype=np.float32)
    for s in range(0, users.size, _CHUNK):
        u, i = users[s : s + _CHUNK], items[s : s + _CHUNK]
        out[s : s + _CHUNK] = np.einsum("nd,nd->n", p[u], q[i]) + bu[u] + bi[i]
    return out


def external_ids(n: int) -> np.ndarray:
    """Ids '1'..'n' as a narrow str array (a plain astype(str) of int64 is 21 chars wide)."""
    return (np.arange(n, dtype=np.int64) + 1).astype(f"<U{len(str(n))}")


def discretise(values: np.ndarray, scale: tuple[float, float], step: float) -> np.ndarray:
    """Round onto the grid lo, lo+step, ..., hi and clip to the scale."""
    lo, hi = scale
    return np.clip(lo + np.round((values - lo) / step) * step, lo, hi).astype(np.float32)


def social_graph(
    factors: np.ndarray,
    popularity: np.ndarray,
    rng: np.random.Generator,
    *,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    degree_exponent: float = 2.5,
) -> tuple[np.ndarray, np.ndarray]:
    """Directed links (src, dst), power-law out-degrees; a `homophily` share joins similar users.

    Similar users are found by sign random projections (LSH buckets); inside a bucket and
    globally, targets are drawn preferentially by `popularity`, so in-degrees are long-tailed too.
    """
    n = factors.shape[0]
    if degree_exponent <= 1.0 or not 0.0 <= homophily <= 1.0 or avg_degree < 0:
        raise ValueError("need degree_exponent > 1, 0 <= homophily <= 1 and avg_degree >= 0")
    if n < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # Out-degree: Pareto(alpha) tail with the requested mean, truncated at a sane maximum.
    raw = np.asarray(rng.pareto(degree_exponent - 1.0, n), dtype=np.float64) + 1.0
    mean_raw = (
        (degree_exponent - 1.0) / (degree_exponent - 2.0)
        if degree_exponent > 2
        else float(raw.mean())
    )
    deg = np.minimum(np.floor(raw * avg_degree / mean_raw), min(n - 1, 10_000)).astype(np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), deg)
    n_bits = int(np.clip(math.floor(math.log2(max(n / 64.0, 1.0))), 1, 20))
    planes = rng.standard_normal((factors.shape[1], n_bits)).astype(np.float32)
    bucket = np.zeros(n, dtype=np.int64)
    for s in range(0, n, _CHUNK):
        bits = (factors[s : s + _CHUNK] @ planes) > 0
        bucket[s : s + _CHUNK] = bits.astype(np.int64) @ (1 << np.arange(n_bits, dtype=np.int64))
    # Users sorted by bucket, most popular first inside each bucket.
    order = np.lexsort((-popularity, bucket))
    sorted_bucket = bucket[order]
    start = np.searchsorted(sorted_bucket, bucket, side="left")
    size = np.searchsorted(sorted_bucket, bucket, side="right") - start
    local = rng.random(src.size) < homophily
    dst = np.empty(src.size, dtype=np.int64)
    s_local = src[local]
    # u^2 puts more mass at the front of the bucket, where its popular users are.
    offset = np.floor(size[s_local] * rng.random(s_local.size) ** 2).astype(np.int64)
    dst[local] = order[start[s_local] + offset]
    dst[~local] = weighted_draw(popularity, int((~local).sum()), rng)
    keep = src != dst
    key = np.sort(src[keep] * n + dst[keep])
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    return key // n, key % n


def generate(
    n_users: int,
    n_items: int,
    n_ratings: int,
    *,
    seed: int,
    rating_scale: tuple[float, float] = (1.0, 5.0),
    rating_step: float = 1.0,
    latent_dim: int = 8,
    noise: float = 0.5,
    user_activity_exponent: float = 0.8,
    item_popularity_exponent: float = 0.8,
    min_user_ratings: int = 1,
    ratios: Sequence[float] = (0.6, 0.2, 0.2),
    social: bool = False,
    social_avg_degree: float = 10.0,
    homophily: float = 0.8,
    name: str = "synthetic",
) -> Dataset:
    """Generate a seeded synthetic explicit-rating data set split into train/valid/test."""
    if min(n_users, n_items, n_ratings, latent_dim) < 1:
        raise ValueError("n_users, n_items, n_ratings and latent_dim must be >= 1")
    lo, hi = (float(x) for x in rating_scale)
    if not lo < hi or rating_step <= 0 or rating_step > hi - lo:
        raise ValueError(f"bad rating scale {rating_scale} / step {rating_step}")
    rng = np.random.default_rng(seed)
    # Reference scale is 1..5 stars; `unit` maps one star onto the requested scale.
    unit = (hi - lo) / 4.0
    sigma = latent_dim**-0.25  # makes <p_u, q_i> have unit standard deviation before `unit`
    p = rng.standard_normal((n_users, latent_dim), dtype=np.float32) * sigma * math.sqrt(0.8 * unit)
    q = rng.standard_normal((n_items, latent_dim), dtype=np.float32) * sigma * math.sqrt(0.8 * unit)
    bu = rng.standard_normal(n_users, dtype=np.float32) * 0.35 * unit
    bi = rng.standard_normal(n_items, dtype=np.float32) * 0.45 * unit
    mu = lo + 2.55 * unit  # about 3.55 stars, as on MovieLens

    user_w = zipf_weights(n_users, user_activity_exponent, rng)
    item_w = zipf_weights(n_items, item_popularity_exponent, rng)
    cap = max(min_user_ratings, int(0.5 * n_items))
    counts = activity_counts(n_users, n_ratings, user_w, minimum=min_user_ratings, cap=cap, rng=rng)
    users, items = sample_pairs(counts, item_w, rng)
    perm = rng.permutation(users.size)  # rows in random order, not grouped by user
    users, items = users[perm], items[perm]

    values = mu + _scores(users, items, p, q, bu, bi)
    values += rng.standard_normal(values.size, dtype=np.float32) * (noise * unit)
    user_ids, item_ids = external_ids(n_users), external_ids(n_items)
    ratings = Ratings(
        user_ids[users],
        item_ids[items],
        discretise(values, (lo, hi), rating_step),
        _T0 + rng.integers(0, 365 * 86_400, users.size, dtype=np.int64),
    )
    links = None
    if social:
        s, d = social_graph(p, user_w, rng, avg_degree=social_avg_degree, homophily=homophily)
        links = SocialLinks(user_ids[s], user_ids[d], np.ones(s.size, dtype=np.float32))
    train, valid, test = random_split(ratings, ratios, rng)
    meta: dict[str, object] = {
        "seed": seed,
        "latent_dim": latent_dim,
        "noise": noise * unit,
        "rating_step": rating_step,
        "global_mean": mu,
        "user_factors": p,
        "item_factors": q,
        "user_bias": bu,
        "item_bias": bi,
    }
    return Dataset(name, train, test, valid, social=links, rating_min=lo, rating_max=hi, meta=meta)


def oracle_predict(dataset: Dataset, user_ids: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """Noise-free expected rating from a generated data set's true parameters, clipped."""
    meta = dataset.meta
    u = np.asarray(user_ids).astype(np.int64) - 1
    i = np.asarray(item_ids).astype(np.int64) - 1
    p, q = meta["user_factors"], meta["item_factors"]
    bu, bi = meta["user_bias"], meta["item_bias"]
    assert isinstance(p, np.ndarray) and isinstance(q, np.ndarray)
    assert isinstance(bu, np.ndarray) and isinstance(bi, np.ndarray)
    raw = float(meta["global_mean"]) + _scores(u, i, p, q, bu, bi)  # type: ignore[arg-type]
    return np.clip(raw, dataset.rating_min, dataset.rating_max)
