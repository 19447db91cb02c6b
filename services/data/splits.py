"""Seeded random train/valid/test splits and the vertical (item-wise) split over parties."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from services.data.types import Dataset, Ratings


def _check_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Validate (train, valid, test) fractions: three non-negative numbers summing to 1."""
    if len(ratios) != 3:
        raise ValueError(f"ratios must be (train, valid, test), got {tuple(ratios)}")
    r = tuple(float(x) for x in ratios)
    if min(r) < 0 or abs(sum(r) - 1.0) > 1e-6 or r[0] <= 0:
        raise ValueError(f"ratios must be non-negative, sum to 1 and give train a share, got {r}")
    return r  # type: ignore[return-value]


def random_split(
    ratings: Ratings, ratios: Sequence[float], rng: np.random.Generator
) -> tuple[Ratings, Ratings, Ratings]:
    """Shuffle rows and cut (train, valid, test) by ratio, e.g. (0.6, 0.2, 0.2) as in VerFedGNN."""
    r = _check_ratios(ratios)
    n = len(ratings)
    order = rng.permutation(n)
    n_train = round(n * r[0])
    n_valid = min(round(n * r[1]), n - n_train)
    # Sorting each part keeps the original row order inside a split (stable, diff-friendly output).
    cuts = np.split(order, [n_train, n_train + n_valid])
    train, valid, test = (ratings.subset(np.sort(c)) for c in cuts)
    return train, valid, test


def with_validation(dataset: Dataset, fraction: float, *, seed: int) -> Dataset:
    """Carve a validation split out of the training ratings; test is untouched."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1), got {fraction}")
    if dataset.valid is not None and len(dataset.valid) > 0:
        raise ValueError(f"data set {dataset.name!r} already has a validation split")
    train, valid, _ = random_split(
        dataset.train, (1.0 - fraction, fraction, 0.0), np.random.default_rng(seed)
    )
    meta = {**dataset.meta, "valid_fraction": fraction, "valid_seed": seed}
    return replace(dataset, train=train, valid=valid, meta=meta)


def dataset_items(dataset: Dataset) -> np.ndarray:
    """Sorted distinct item ids over all splits."""
    parts = [dataset.train.item_ids, dataset.test.item_ids]
    if dataset.valid is not None:
        parts.append(dataset.valid.item_ids)
    return np.unique(np.concatenate(parts).astype(str))


def dataset_users(dataset: Dataset) -> np.ndarray:
    """Sorted distinct user ids over all splits."""
    parts = [dataset.train.user_ids, dataset.test.user_ids]
    if dataset.valid is not None:
        parts.append(dataset.valid.user_ids)
    return np.unique(np.concatenate(parts).astype(str))


def vertical_split(
    items: np.ndarray,
    n_parties: int,
    rng: np.random.Generator,
    *,
    shares: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """Assign items to parties at random, non-overlapping; equal sizes unless `shares` given."""
    items = np.asarray(items)
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1, got {n_parties}")
    if np.unique(items).size != items.size:
        raise ValueError("items must be distinct")
    if items.size < n_parties:
        raise ValueError(f"cannot split {items.size} items over {n_parties} parties")
    if shares is None:
        shares = [1.0 / n_parties] * n_parties
    w = np.asarray(shares, dtype=np.float64)
    if w.size != n_parties or (w <= 0).any() or abs(w.sum() - 1.0) > 1e-6:
        raise ValueError(
            f"shares must be {n_parties} positive numbers summing to 1, got {list(shares)}"
        )
    # Largest-remainder rounding, then make sure nobody ends up empty.
    raw = w * items.size
    counts = np.floor(raw).astype(np.int64)
    counts[np.argsort(-(raw - counts))[: items.size - counts.sum()]] += 1
    while (counts == 0).any():
        counts[np.argmax(counts)] -= 1
        counts[np.flatnonzero(counts == 0)[0]] += 1
    shuffled = items[rng.permutation(items.size)]
    return [np.sort(part) for part in np.split(shuffled, np.cumsum(counts)[:-1])]


def party_index(item_ids: np.ndarray, parties: Sequence[np.ndarray]) -> np.ndarray:
    """Party number of each item id; raises if an item belongs to no party or to several."""
    owned = np.concatenate([np.asarray(p).astype(str) for p in parties])
    owner = np.concatenate([np.full(len(p), k, dtype=np.int64) for k, p in enumerate(parties)])
    order = np.argsort(owned, kind="stable")
    owned, owner = owned[order], owner[order]
    if owned.size > 1 and (owned[1:] == owned[:-1]).any():
        dup = owned[1:][owned[1:] == owned[:-1]][0]
        raise ValueError(f"item {str(dup)!r} is assigned to more than one party")
    ids = np.asarray(item_ids).astype(str)
    if owned.size == 0:
        if ids.size:
            raise ValueError(f"item {str(ids[0])!r} is not assigned to any party")
        return np.zeros(0, dtype=np.int64)
    pos = np.clip(np.searchsorted(owned, ids), 0, owned.size - 1)
    hit = owned[pos] == ids
    if not hit.all():
        raise ValueError(f"item {str(ids[~hit][0])!r} is not assigned to any party")
    return owner[pos]


def split_by_party(dataset: Dataset, parties: Sequence[np.ndarray]) -> list[Dataset]:
    """Per-party data sets: each keeps its own items' ratings in every split; users are shared."""

    def part(r: Ratings, k: int, idx: np.ndarray) -> Ratings:
        return r.subset(idx == k)

    idx_train = party_index(dataset.train.item_ids, parties)
    idx_test = party_index(dataset.test.item_ids, parties)
    idx_valid = party_index(dataset.valid.item_ids, parties) if dataset.valid is not None else None
    out = []
    for k, items in enumerate(parties):
        valid = (
            part(dataset.valid, k, idx_valid)
            if dataset.valid is not None and idx_valid is not None
            else None
        )
        meta = {**dataset.meta, "party": k, "n_parties": len(parties), "items": np.asarray(items)}
        out.append(
            replace(
                dataset,
                name=f"{dataset.name}/party{k}",
                train=part(dataset.train, k, idx_train),
                test=part(dataset.test, k, idx_test),
                valid=valid,
                social=None,
                meta=meta,
            )
        )
    return out


def vertical_split_dataset(
    dataset: Dataset, n_parties: int, *, seed: int, shares: Sequence[float] | None = None
) -> list[Dataset]:
    """Assign the data set's items to parties at random (seeded); return per-party data sets."""
    parties = vertical_split(
        dataset_items(dataset), n_parties, np.random.default_rng(seed), shares=shares
    )
    return split_by_party(dataset, parties)


def user_overlap(
    users: np.ndarray, n_parties: int, rng: np.random.Generator, *, overlap: float = 1.0
) -> list[np.ndarray]:
    """Users held by each party: a seeded `overlap` share at every party, each other user at one party (uniform)."""
    users = np.unique(np.asarray(users).astype(str))
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1, got {n_parties}")
    if not 0.0 < overlap <= 1.0:
        raise ValueError(f"overlap must be in (0, 1], got {overlap}")
    if overlap == 1.0:
        # Today's shape, and no draw from rng: a default split stays byte-identical.
        return [users.copy() for _ in range(n_parties)]
    shared = np.zeros(users.size, dtype=bool)
    shared[rng.choice(users.size, size=round(overlap * users.size), replace=False)] = True
    home = rng.integers(0, n_parties, size=users.size)
    return [np.sort(users[shared | (home == k)]) for k in range(n_parties)]


def keep_users(ratings: Ratings, users: np.ndarray) -> Ratings:
    """The rows of `ratings` whose user is in `users`."""
    return ratings.subset(np.isin(ratings.user_ids.astype(str), np.asarray(users).astype(str)))


def primary_genre_groups(genres: dict[str, str], items: np.ndarray) -> dict[str, np.ndarray]:
    """Items grouped by their primary genre (`genres[item]`); items without one fall in "unknown"."""
    names = np.array([genres.get(str(i), "unknown") for i in np.asarray(items).astype(str)], dtype=str)
    items = np.asarray(items).astype(str)
    return {g: np.sort(items[names == g]) for g in sorted(set(names.tolist()))}


def genre_split(
    groups: dict[str, np.ndarray], n_parties: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], dict[str, int]]:
    """A domain split: whole genre groups to parties, balanced by item count; returns (party items, genre → party).

    Groups go largest first to the party holding the fewest items so far (ties: lowest party);
    groups of equal size are taken in a seeded random order.
    """
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1, got {n_parties}")
    names = [g for g in groups if len(groups[g])]
    if len(names) < n_parties:
        raise ValueError(f"cannot split {len(names)} genre groups over {n_parties} parties")
    shuffled = [names[k] for k in rng.permutation(len(names))]
    order = sorted(shuffled, key=lambda g: -len(groups[g]))  # stable: equal sizes keep the seeded order
    load = np.zeros(n_parties, dtype=np.int64)
    owner: dict[str, int] = {}
    for g in order:
        k = int(np.argmin(load))
        owner[g] = k
        load[k] += len(groups[g])
    parts = [
        np.sort(np.concatenate([np.asarray(groups[g]).astype(str) for g in names if owner[g] == k]))
        for k in range(n_parties)
    ]
    return parts, dict(sorted(owner.items()))


def implicit_feedback(ratings: Ratings, threshold: float) -> Ratings:
    """Ratings at or above `threshold` become interactions of value 1.0; the rest are dropped."""
    keep = ratings.subset(ratings.ratings >= threshold)
    return Ratings(keep.user_ids, keep.item_ids, np.ones(len(keep), dtype=np.float32), keep.timestamps)


def assign_parties(
    items: np.ndarray,
    users: np.ndarray,
    n_parties: int,
    *,
    seed: int,
    shares: Sequence[float] | None = None,
    overlap: float = 1.0,
    genres: dict[str, str] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int] | None]:
    """Items (at random, or whole primary-genre groups when `genres`) then users (`overlap`) to parties.

    Returns (items per party, users per party, genre → party or None). One generator, items first:
    a default split (random items, overlap 1) draws exactly what `vertical_split` alone draws.
    """
    rng = np.random.default_rng(seed)
    owner: dict[str, int] | None = None
    if genres is None:
        parties = vertical_split(items, n_parties, rng, shares=shares)
    else:
        if shares is not None:
            raise ValueError("--shares applies to --by random only (genre groups are balanced by item count)")
        parties, owner = genre_split(primary_genre_groups(genres, items), n_parties, rng)
    return parties, user_overlap(users, n_parties, rng, overlap=overlap), owner
