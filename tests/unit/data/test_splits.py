"""Random and vertical splits: sizes, disjointness, determinism, recombination, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.data.parsing import concat_ratings
from services.data.splits import (
    dataset_items,
    dataset_users,
    party_index,
    random_split,
    split_by_party,
    vertical_split,
    vertical_split_dataset,
    with_validation,
)
from services.data.types import Dataset, Ratings


def _ratings(n: int, n_users: int = 30, n_items: int = 40, seed: int = 0) -> Ratings:
    """Distinct random (user, item) pairs with ratings 1..5."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(n_users * n_items, size=n, replace=False)
    return Ratings(
        (keys // n_items).astype(str),
        (keys % n_items).astype(str),
        rng.integers(1, 6, n).astype(np.float32),
        np.arange(n, dtype=np.int64),
    )


def _rows(r: Ratings) -> set[tuple[str, str]]:
    return set(zip(r.user_ids.tolist(), r.item_ids.tolist()))


def test_random_split_sizes_disjoint_and_seeded() -> None:
    r = _ratings(1000)
    train, valid, test = random_split(r, (0.6, 0.2, 0.2), np.random.default_rng(5))
    assert (len(train), len(valid), len(test)) == (600, 200, 200)
    assert _rows(train) | _rows(valid) | _rows(test) == _rows(r)
    assert not (_rows(train) & _rows(test)) and not (_rows(valid) & _rows(test))
    again = random_split(r, (0.6, 0.2, 0.2), np.random.default_rng(5))[2]
    other = random_split(r, (0.6, 0.2, 0.2), np.random.default_rng(6))[2]
    assert np.array_equal(test.timestamps, again.timestamps)
    assert not np.array_equal(test.timestamps, other.timestamps)
    # Rows keep their original order inside each part.
    assert np.all(np.diff(train.timestamps) > 0)


@pytest.mark.parametrize(
    "ratios", [(0.5, 0.5), (0.7, 0.2, 0.2), (0.0, 0.5, 0.5), (1.2, -0.1, -0.1)]
)
def test_random_split_rejects_bad_ratios(ratios: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="ratios"):
        random_split(_ratings(10), ratios, np.random.default_rng(0))


def test_with_validation_carves_from_train_only() -> None:
    train, _, test = random_split(_ratings(500), (0.8, 0.0, 0.2), np.random.default_rng(0))
    ds = Dataset("x", train, test)
    out = with_validation(ds, 0.25, seed=3)
    assert out.valid is not None and len(out.valid) == 100 and len(out.train) == 300
    assert _rows(out.train) | _rows(out.valid) == _rows(train)
    assert out.test is test and out.meta["valid_seed"] == 3
    with pytest.raises(ValueError, match="already has a validation"):
        with_validation(out, 0.1, seed=0)
    with pytest.raises(ValueError, match="fraction"):
        with_validation(ds, 1.0, seed=0)


@settings(max_examples=40, deadline=None)
@given(n_items=st.integers(1, 200), n_parties=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_vertical_split_partitions_items(n_items: int, n_parties: int, seed: int) -> None:
    items = np.arange(n_items).astype(str)
    if n_items < n_parties:
        with pytest.raises(ValueError, match="cannot split"):
            vertical_split(items, n_parties, np.random.default_rng(seed))
        return
    parts = vertical_split(items, n_parties, np.random.default_rng(seed))
    assert len(parts) == n_parties and all(p.size >= 1 for p in parts)
    assert sorted(np.concatenate(parts).tolist()) == sorted(items.tolist())
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_vertical_split_shares_and_randomness() -> None:
    items = np.arange(1000).astype(str)
    parts = vertical_split(items, 2, np.random.default_rng(1), shares=(0.2, 0.8))
    assert [p.size for p in parts] == [200, 800]
    again = vertical_split(items, 2, np.random.default_rng(1), shares=(0.2, 0.8))
    assert np.array_equal(parts[0], again[0])
    # Random, not a contiguous block of ids.
    assert not np.array_equal(parts[0], np.sort(items)[:200])
    with pytest.raises(ValueError, match="shares"):
        vertical_split(items, 2, np.random.default_rng(1), shares=(0.5, 0.6))
    with pytest.raises(ValueError, match="distinct"):
        vertical_split(np.array(["a", "a", "b"]), 2, np.random.default_rng(1))


def test_split_by_party_keeps_own_items_and_recombines() -> None:
    train, valid, test = random_split(_ratings(800), (0.6, 0.2, 0.2), np.random.default_rng(2))
    ds = Dataset("toy", train, test, valid, meta={"k": 1})
    parties = vertical_split_dataset(ds, 3, seed=4)
    assert [p.name for p in parties] == ["toy/party0", "toy/party1", "toy/party2"]
    owned = [set(p.meta["items"].tolist()) for p in parties]  # type: ignore[union-attr]
    assert set().union(*owned) == set(dataset_items(ds).tolist())
    for p, items in zip(parties, owned):
        assert set(p.train.item_ids.tolist()) <= items and set(p.test.item_ids.tolist()) <= items
        assert p.valid is not None and set(p.valid.item_ids.tolist()) <= items
        assert p.meta["k"] == 1
    assert _rows(concat_ratings([p.train for p in parties])) == _rows(train)
    assert _rows(concat_ratings([p.test for p in parties])) == _rows(test)
    # Users are shared: every party's users come from the same population.
    assert set().union(*(set(dataset_users(p).tolist()) for p in parties)) == set(
        dataset_users(ds).tolist()
    )


def test_party_index_rejects_unknown_and_overlapping_items() -> None:
    parts = [np.array(["a", "b"]), np.array(["c"])]
    assert party_index(np.array(["c", "a", "b", "c"]), parts).tolist() == [1, 0, 0, 1]
    with pytest.raises(ValueError, match="'z' is not assigned"):
        party_index(np.array(["a", "z"]), parts)
    with pytest.raises(ValueError, match="more than one party"):
        party_index(np.array(["a"]), [np.array(["a"]), np.array(["a", "b"])])
    ds = Dataset("t", _ratings(20), _ratings(5, seed=1))
    with pytest.raises(ValueError, match="not assigned"):
        split_by_party(ds, [np.array(["0"])])
