"""Social data sets: the CiaoDVD reader (real files and small written ones) and format detection of load_social."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.data.ciaodvd import load_ciaodvd, read_ciaodvd_ratings, read_ciaodvd_trust
from services.data.csv import write_links_csv, write_ratings_csv
from services.data.formats import detect_format, load_all
from services.data.parsing import DataFormatError
from services.data.social import detect_social_format, load_social
from services.data.types import Ratings, SocialLinks
from services.p4gcn.graph import adjacency_from_links
from tests.support.layout import DATA

CIAO = DATA / "ciaodvd"
FILMTRUST = DATA / "filmtrust"
needs_ciao = pytest.mark.skipif(not CIAO.is_dir() or not FILMTRUST.is_dir(), reason="shared data sets absent")


@needs_ciao
def test_ciaodvd_real_files_keep_the_latest_rating_of_each_pair() -> None:
    with pytest.warns(UserWarning, match="320 duplicated"):
        r, dropped = read_ciaodvd_ratings(CIAO / "ciao_ratings.txt")
    assert dropped == 320 and len(r) == 72_345
    assert np.unique(r.user_ids).size == 17_615 and np.unique(r.item_ids).size == 16_121
    assert (r.ratings.min(), r.ratings.max()) == (1.0, 5.0)
    lookup = {(u, i): v for u, i, v in zip(r.user_ids, r.item_ids, r.ratings)}
    # (10392, 6672): 5 on 2001-09-10 comes first in the file, 4 on 2001-09-07 later: the later date wins.
    assert lookup[("10392", "6672")] == 5.0 and lookup[("1052", "6272")] == 2.0
    links = read_ciaodvd_trust(CIAO / "ciao_trusts.txt")
    assert links.src.size == 40_133 and np.all(links.weight == 1.0)
    adj = adjacency_from_links(links, list(np.unique(r.user_ids)))
    assert adj.nnz // 2 == 18_424 and int((adj.getnnz(axis=1) > 0).sum()) == 2_433  # symmetrised, rating users


@needs_ciao
def test_load_social_detects_filmtrust_and_ciaodvd_and_reads_the_range() -> None:
    assert detect_social_format(CIAO) == "ciaodvd" and detect_social_format(FILMTRUST) == "filmtrust"
    assert detect_format(CIAO) == "ciaodvd"
    with pytest.warns(UserWarning):
        ciao = load_social(CIAO, seed=2)
    with pytest.warns(UserWarning):
        film = load_social(FILMTRUST, fmt="filmtrust", seed=2)
    assert ciao.valid is not None and ciao.social is not None
    assert len(ciao.train) + len(ciao.valid) + len(ciao.test) == 72_345
    assert (ciao.rating_min, ciao.rating_max) == (1.0, 5.0) and (film.rating_min, film.rating_max) == (0.5, 4.0)
    assert ciao.meta["format"] == "ciaodvd" and ciao.name == "ciaodvd"
    with pytest.warns(UserWarning):
        assert len(load_all(CIAO).train) == 72_345


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines))  # no trailing newline, as the release
    return path


def test_ciaodvd_written_files_dates_ties_and_errors(tmp_path: Path) -> None:
    _write(tmp_path / "movie-ratings.txt", [
        "1,10,1,100,5,2003-01-02", "1,10,1,101,2,2001-01-01",  # the later date wins although it comes first
        "2,10,1,102,3,2002-05-05", "2,10,1,103,4,2002-05-05",  # same date: the later line wins
        "3,11,2,104,1,2000-05-31"])
    _write(tmp_path / "trusts.txt", ["1,2,1", "2,1,1", "3,1,1"])
    with pytest.warns(UserWarning, match="2 duplicated"):
        ds = load_ciaodvd(tmp_path, seed=0, ratios=(0.34, 0.33, 0.33))
    rows = sorted(zip(*(np.concatenate([getattr(s, f) for s in (ds.train, ds.valid, ds.test) if s is not None])
                        .tolist() for f in ("user_ids", "item_ids", "ratings"))))
    assert rows == [("1", "10", 5.0), ("2", "10", 4.0), ("3", "11", 1.0)]
    assert (ds.rating_min, ds.rating_max) == (1.0, 5.0) and ds.social is not None and ds.social.src.size == 3
    r, _ = read_ciaodvd_ratings(_write(tmp_path / "one.txt", ["1,10,1,100,5,2003-01-02"]))
    assert int(r.timestamps[0]) == 1041465600  # 2003-01-02T00:00:00Z
    with pytest.raises(DataFormatError, match="line 2: date is not YYYY-MM-DD"):
        read_ciaodvd_ratings(_write(tmp_path / "bad.txt", ["1,10,1,100,5,2003-01-02", "1,11,1,101,5,yesterday"]))
    with pytest.raises(DataFormatError, match="line 1: expected 6 fields"):
        read_ciaodvd_ratings(_write(tmp_path / "short.txt", ["1,10,5,2003-01-02"]))
    with pytest.raises(DataFormatError, match="line 2: self-loop"):
        read_ciaodvd_trust(_write(tmp_path / "loops.txt", ["1,2,1", "4,4,1"]))


def test_load_social_csv_pair_takes_its_range_from_the_data(tmp_path: Path) -> None:
    users = np.array([str(u % 7) for u in range(40)])
    items = np.array([str(u % 11) for u in range(40)])
    ratings = Ratings(users, np.array([f"{i}-{k}" for k, i in enumerate(items)]),
                      np.linspace(1, 10, 40).astype(np.float32), np.zeros(40, dtype=np.int64))
    write_ratings_csv(tmp_path / "ratings.csv", ratings)
    write_links_csv(tmp_path / "links.csv", SocialLinks(np.array(["0", "1"]), np.array(["1", "2"]),
                                                        np.ones(2, dtype=np.float32)))
    assert detect_social_format(tmp_path) == "csv" and detect_social_format(tmp_path / "ratings.csv") == "csv"
    ds = load_social(tmp_path, seed=1)
    assert (ds.rating_min, ds.rating_max) == (1.0, 10.0) and ds.social is not None and ds.social.src.size == 2
    moved = tmp_path / "elsewhere.csv"
    (tmp_path / "links.csv").rename(moved)
    named = load_social(tmp_path / "ratings.csv", links=moved, seed=1)
    assert named.social is not None and named.social.dst.tolist() == ["1", "2"]
    with pytest.raises(ValueError, match="cannot tell the social format"):
        load_social(tmp_path)
    with pytest.raises(ValueError, match="unknown social format"):
        load_social(tmp_path / "ratings.csv", fmt="epinions")
