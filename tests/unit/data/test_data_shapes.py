"""Partial user overlap, genre (domain) item splits and implicit feedback: the pure split functions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.data.movielens import read_ml1m_genres, read_ml100k_genres
from services.data.parsing import DataFormatError
from services.data.splits import (
    genre_split,
    implicit_feedback,
    keep_users,
    primary_genre_groups,
    user_overlap,
)
from services.data.types import Ratings


def _users(n: int) -> np.ndarray:
    return np.array([f"u{k}" for k in range(n)])


@pytest.mark.parametrize("overlap", [0.2, 0.5, 0.9])
@pytest.mark.parametrize("n_parties", [2, 3])
def test_overlap_share_is_kept_at_every_party_and_others_at_exactly_one(overlap: float, n_parties: int) -> None:
    users = _users(2000)
    parts = user_overlap(users, n_parties, np.random.default_rng(1), overlap=overlap)
    held = np.stack([np.isin(users, p) for p in parts])  # (parties, users)
    everywhere = held.all(axis=0)
    assert everywhere.sum() == round(overlap * users.size)  # the measured share is the asked share
    assert (held.sum(axis=0)[~everywhere] == 1).all()  # every other user at exactly one party
    # Non-shared users spread over the parties roughly uniformly (seeded).
    alone = held[:, ~everywhere].sum(axis=1)
    assert alone.min() > 0.8 * alone.mean()


def test_overlap_one_is_every_user_everywhere_and_draws_nothing() -> None:
    rng = np.random.default_rng(5)
    parts = user_overlap(_users(10), 3, rng, overlap=1.0)
    assert all(p.tolist() == sorted(_users(10).tolist()) for p in parts)
    assert rng.integers(1 << 30) == np.random.default_rng(5).integers(1 << 30)


def test_overlap_is_seeded_and_refuses_bad_shares() -> None:
    a = user_overlap(_users(100), 2, np.random.default_rng(3), overlap=0.3)
    b = user_overlap(_users(100), 2, np.random.default_rng(3), overlap=0.3)
    c = user_overlap(_users(100), 2, np.random.default_rng(4), overlap=0.3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="overlap"):
            user_overlap(_users(10), 2, np.random.default_rng(0), overlap=bad)


def test_keep_users_filters_rows() -> None:
    r = Ratings(np.array(["a", "b", "a", "c"]), np.array(["1", "1", "2", "3"]),
                np.array([1, 2, 3, 4], np.float32), np.zeros(4, np.int64))
    kept = keep_users(r, np.array(["a", "c"]))
    assert kept.user_ids.tolist() == ["a", "a", "c"] and kept.ratings.tolist() == [1, 3, 4]


def _genres() -> dict[str, str]:
    rng = np.random.default_rng(0)
    names = ["Drama", "Comedy", "Action", "Horror", "War", "Western"]
    sizes = rng.integers(1, 60, len(names))
    out, n = {}, 0
    for g, s in zip(names, sizes.tolist()):
        for _ in range(s):
            out[f"i{n}"] = g
            n += 1
    return out


@pytest.mark.parametrize("n_parties", [2, 3])
def test_genre_split_keeps_whole_groups_balanced_and_disjoint(n_parties: int) -> None:
    genres = _genres()
    items = np.array([*genres, "orphan"])  # an item without a genre falls in "unknown"
    groups = primary_genre_groups(genres, items)
    assert groups["unknown"].tolist() == ["orphan"]
    parts, owner = genre_split(groups, n_parties, np.random.default_rng(2))
    flat = np.concatenate(parts)
    assert flat.size == items.size and np.unique(flat).size == items.size  # no item at two parties, none lost
    for g, members in groups.items():  # every group lies wholly at the party the mapping names
        assert np.isin(members, parts[owner[g]]).all()
    sizes = np.array([p.size for p in parts])
    assert sizes.min() > 0 and sizes.max() - sizes.min() <= max(len(m) for m in groups.values())
    again, owner2 = genre_split(groups, n_parties, np.random.default_rng(2))
    assert owner == owner2 and all(np.array_equal(x, y) for x, y in zip(parts, again))


def test_genre_split_needs_a_group_per_party() -> None:
    groups = primary_genre_groups({"a": "Drama", "b": "Drama"}, np.array(["a", "b"]))
    with pytest.raises(ValueError, match="1 genre groups over 2 parties"):
        genre_split(groups, 2, np.random.default_rng(0))


def test_implicit_threshold_drops_the_rows_below_it() -> None:
    r = Ratings(np.array(["a", "a", "b", "b", "c"]), np.array(["1", "2", "1", "3", "2"]),
                np.array([5, 3, 4, 3.5, 1], np.float32), np.arange(5, dtype=np.int64))
    out = implicit_feedback(r, 3.5)
    assert list(zip(out.user_ids.tolist(), out.item_ids.tolist())) == [("a", "1"), ("b", "1"), ("b", "3")]
    assert out.ratings.tolist() == [1.0, 1.0, 1.0] and out.ratings.dtype == np.float32
    assert out.timestamps.tolist() == [0, 2, 3]


def test_genre_readers(tmp_path: Path) -> None:
    (tmp_path / "u.genre").write_text("unknown|0\nAction|1\nComedy|2\n\n")
    (tmp_path / "u.item").write_bytes("1|Caf\xe9 (1995)|||url|0|0|1\n2|B|||u|0|1|1\n3|C|||u|0|0|0\n".encode("latin-1"))
    assert read_ml100k_genres(tmp_path) == {"1": "Comedy", "2": "Action", "3": "unknown"}
    (tmp_path / "u.item").write_text("1|A|||u|0|1\n")
    with pytest.raises(DataFormatError, match="line 1: 2 genre flags, expected 3"):
        read_ml100k_genres(tmp_path)
    (tmp_path / "movies.dat").write_bytes("1::Toy Story (1995)::Animation|Children's|Comedy\n2::Caf\xe9::Drama\n".encode("latin-1"))
    assert read_ml1m_genres(tmp_path) == {"1": "Animation", "2": "Drama"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="movies.dat"):
        read_ml1m_genres(tmp_path / "empty")
