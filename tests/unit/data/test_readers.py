"""Readers against the real MovieLens-100K / FilmTrust files and small written ML-1M / CSV files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.data.csv import read_csv_links, read_csv_ratings, write_links_csv, write_ratings_csv
from services.data.filmtrust import load_filmtrust, read_filmtrust_ratings, read_filmtrust_trust
from services.data.movielens import (
    ML100K_SPLITS,
    load_ml1m,
    load_ml100k,
    read_ml1m_ratings,
    read_ml100k_ratings,
)
from services.data.parsing import DataFormatError
from services.data.types import Ratings, SocialLinks
from services.errors import ValidationFailed
from tests.support.layout import DATA

ML100K = DATA / "ml-100k"
FILMTRUST = DATA / "filmtrust"

needs_data = pytest.mark.skipif(
    not ML100K.is_dir() or not FILMTRUST.is_dir(), reason="shared data sets absent"
)


def _pairs(r: Ratings) -> list[tuple[str, str, float, int]]:
    """Rows as a sorted multiset for comparisons."""
    return sorted(
        zip(r.user_ids.tolist(), r.item_ids.tolist(), r.ratings.tolist(), r.timestamps.tolist())
    )


@needs_data
def test_ml100k_full_file_matches_published_counts() -> None:
    r = read_ml100k_ratings(ML100K / "u.data")
    assert len(r) == 100_000
    assert np.unique(r.user_ids).size == 943 and np.unique(r.item_ids).size == 1682
    values, counts = np.unique(r.ratings, return_counts=True)
    assert values.tolist() == [1, 2, 3, 4, 5]
    assert counts.tolist() == [6110, 11370, 27145, 34174, 21201]
    assert r.timestamps.min() == 874724710 and r.timestamps.max() == 893286638
    assert r.ratings.dtype == np.float32 and r.timestamps.dtype == np.int64


@needs_data
@pytest.mark.parametrize("split", ["u1", "ua"])
def test_ml100k_official_split_rebuilds_u_data(split: str) -> None:
    ds = load_ml100k(ML100K, split)
    full = read_ml100k_ratings(ML100K / "u.data")
    assert len(ds.train) + len(ds.test) == 100_000
    both = Ratings(
        *(
            np.concatenate([getattr(ds.train, f), getattr(ds.test, f)])
            for f in ("user_ids", "item_ids", "ratings", "timestamps")
        )
    )
    assert _pairs(both) == _pairs(full)
    assert (
        ds.valid is None
        and ds.meta["split"] == split
        and (ds.rating_min, ds.rating_max) == (1.0, 5.0)
    )


@needs_data
def test_ml100k_u1_sizes_and_random_split() -> None:
    ds = load_ml100k(ML100K, "u1")
    assert (len(ds.train), len(ds.test)) == (80_000, 20_000)
    rnd = load_ml100k(ML100K, None, seed=7, ratios=(0.6, 0.2, 0.2))
    assert rnd.valid is not None
    assert (len(rnd.train), len(rnd.valid), len(rnd.test)) == (60_000, 20_000, 20_000)
    again = load_ml100k(ML100K, None, seed=7)
    assert np.array_equal(rnd.test.user_ids, again.test.user_ids)
    assert np.array_equal(rnd.test.item_ids, again.test.item_ids)
    with pytest.raises(ValueError, match="split must be one of"):
        load_ml100k(ML100K, "u9")
    assert set(ML100K_SPLITS) == {"u1", "u2", "u3", "u4", "u5", "ua", "ub"}


@needs_data
def test_filmtrust_ratings_dedupe_keeps_last_and_warns() -> None:
    with pytest.warns(UserWarning, match="3 duplicated"):
        r, dropped = read_filmtrust_ratings(FILMTRUST / "ratings.txt")
    assert dropped == 3 and len(r) == 35_494
    assert np.unique(r.user_ids).size == 1508 and np.unique(r.item_ids).size == 2071
    assert r.ratings.min() == 0.5 and r.ratings.max() == 4.0
    # The file rates (308, 207) 3.5 then 3, and (308, 235) 4 then 1.5: the last ones win.
    lookup = {(u, i): v for u, i, v in zip(r.user_ids, r.item_ids, r.ratings)}
    assert (
        lookup[("308", "207")] == 3.0
        and lookup[("308", "235")] == 1.5
        and lookup[("308", "12")] == 4.0
    )


@needs_data
def test_filmtrust_trust_and_dataset() -> None:
    links = read_filmtrust_trust(FILMTRUST / "trust.txt")
    assert links.src.size == 1853 and np.all(links.weight == 1.0)
    assert np.unique(links.src).size == 609 and np.unique(links.dst).size == 732
    with pytest.warns(UserWarning):
        ds = load_filmtrust(FILMTRUST, seed=1)
    assert ds.valid is not None and ds.social is not None
    assert len(ds.train) + len(ds.valid) + len(ds.test) == 35_494
    assert (ds.rating_min, ds.rating_max) == (0.5, 4.0) and ds.meta["duplicates_dropped"] == 3


def test_ml1m_reader_on_written_file(tmp_path: Path) -> None:
    f = tmp_path / "ratings.dat"
    f.write_text(
        "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n\n3::48::1::978301368\n"
    )
    r = read_ml1m_ratings(f)
    assert r.user_ids.tolist() == ["1", "1", "2", "3"] and r.ratings.tolist() == [5, 3, 4, 1]
    assert r.timestamps[0] == 978300760
    ds = load_ml1m(tmp_path, seed=0, ratios=(0.5, 0.25, 0.25))
    assert ds.name == "ml-1m" and len(ds.train) + len(ds.test) + len(ds.valid or []) == 4  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        ("1::2::3::4\n1::2::3\n", 2, "expected 4 fields"),
        ("1::2::3::4\n\n5::6::x::7\n", 3, "rating is not a number"),
        ("1::2::7::4\n", 1, "outside"),
        ("1::2::3::4\n1::2::3::4.5\n", 2, "timestamp is not a number"),
        ("1::::3::4\n", 1, "empty item_id"),
        ("1::2::nan::4\n", 1, "outside"),
    ],
)
def test_ml1m_malformed_lines_name_the_line(
    tmp_path: Path, content: str, line: int, reason: str
) -> None:
    f = tmp_path / "ratings.dat"
    f.write_text(content)
    with pytest.raises(DataFormatError, match=reason) as info:
        read_ml1m_ratings(f)
    assert info.value.line == line and f"line {line}" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ValidationFailed)


def test_ml100k_bad_tab_line_and_missing_dir(tmp_path: Path) -> None:
    f = tmp_path / "u.data"
    f.write_text("1\t2\t3\t4\n1 2 3 4\n")
    with pytest.raises(DataFormatError, match="line 2: expected 4 fields"):
        read_ml100k_ratings(f)
    with pytest.raises(FileNotFoundError):
        load_ml100k(tmp_path / "nope")


def test_filmtrust_bad_trust_line(tmp_path: Path) -> None:
    f = tmp_path / "trust.txt"
    f.write_text("1 2 1\n3 3 1\n")
    with pytest.raises(DataFormatError, match="line 2: self-loop"):
        read_filmtrust_trust(f)
    f.write_text("1 2 1\n3 4\n")
    with pytest.raises(DataFormatError, match="line 2"):
        read_filmtrust_trust(f)
    g = tmp_path / "ratings.txt"
    g.write_text("1 2 3.5\n1 3 4.5\n")
    with pytest.raises(DataFormatError, match="line 2: rating '4.5' outside"):
        read_filmtrust_ratings(g)


def test_csv_custom_columns_delimiter_and_optional_timestamp(tmp_path: Path) -> None:
    f = tmp_path / "r.csv"
    f.write_text('uid;extra;iid;score\nalice;x;m1;4.5\nbob;y;"m,2";2\n')
    r = read_csv_ratings(f, user_col="uid", item_col="iid", rating_col="score", delimiter=";")
    assert r.user_ids.tolist() == ["alice", "bob"] and r.item_ids.tolist() == ["m1", "m,2"]
    assert r.ratings.tolist() == [4.5, 2.0] and r.timestamps.tolist() == [0, 0]


def test_csv_errors_name_row_and_column(tmp_path: Path) -> None:
    f = tmp_path / "r.csv"
    f.write_text("user_id,item_id,rating,timestamp\n1,2,3,4\n1,2,three,5\n")
    with pytest.raises(DataFormatError, match="line 3: rating is not a number: 'three'"):
        read_csv_ratings(f)
    f.write_text("user_id,item,rating\n1,2,3\n")
    with pytest.raises(DataFormatError, match="missing column 'item_id'") as info:
        read_csv_ratings(f)
    assert info.value.field == "item_id"
    f.write_text("user_id,item_id,rating\n1,2,3\n4,5\n")
    with pytest.raises(DataFormatError, match="line 3: expected 3 fields"):
        read_csv_ratings(f)
    f.write_text("user_id,item_id,rating\n1,2,9\n")
    with pytest.raises(DataFormatError, match="outside"):
        read_csv_ratings(f, rating_range=(1, 5))
    f.write_text("")
    with pytest.raises(DataFormatError, match="header row is required"):
        read_csv_ratings(f)


def test_csv_round_trip_and_duplicates(tmp_path: Path) -> None:
    r = Ratings(
        np.array(["u1", "u2", "u1"]),
        np.array(["i1", "i1", "i1"]),
        np.array([4.0, 0.5, 3.5], dtype=np.float32),
        np.array([10, 20, 30], dtype=np.int64),
    )
    f = tmp_path / "out" / "r.csv"
    assert write_ratings_csv(f, r) == 3
    assert f.read_text().splitlines()[:2] == ["user_id,item_id,rating,timestamp", "u1,i1,4,10"]
    with pytest.warns(UserWarning, match="1 duplicated"):
        back = read_csv_ratings(f)
    assert _pairs(back) == [("u1", "i1", 3.5, 30), ("u2", "i1", 0.5, 20)]
    links = SocialLinks(
        np.array(["1", "2"]), np.array(["2", "3"]), np.array([1.0, 0.25], dtype=np.float32)
    )
    g = tmp_path / "links.csv"
    write_links_csv(g, links)
    got = read_csv_links(g)
    assert got.src.tolist() == ["1", "2"] and got.weight.tolist() == [1.0, 0.25]
