"""Reader for CiaoDVD (Guo et al. 2014): movie ratings with dates and directed trust links.

ratings: `userID,movieID,genreID,reviewID,rating,date(YYYY-MM-DD)` (file `movie-ratings.txt`, or
`ciao_ratings.txt` as some copies name it); trusts: `trustorID,trusteeID,trustValue` (`trusts.txt` or
`ciao_trusts.txt`). No header. A user who rated a movie twice keeps the latest rating (by date;
the later line among equal dates): 72,665 records give 72,345 (user, movie) pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.data.parsing import (
    DataFormatError,
    dedupe_keep_last,
    empty_links,
    parse_ids,
    parse_numbers,
    read_rows,
    split_fields,
)
from services.data.splits import random_split
from services.data.types import Dataset, Ratings, SocialLinks

RATING_FILES = ("movie-ratings.txt", "ciao_ratings.txt")
TRUST_FILES = ("trusts.txt", "ciao_trusts.txt")
_DAY = 86_400


def _dates(path: Path, values: list[str], numbers: list[int]) -> np.ndarray:
    """YYYY-MM-DD dates as unix timestamps (seconds, midnight UTC)."""
    try:
        days = np.array(values, dtype="datetime64[D]")
    except ValueError:
        for value, line in zip(values, numbers):
            try:
                np.datetime64(value, "D")
            except ValueError:
                raise DataFormatError(path, line, f"date is not YYYY-MM-DD: {value!r}", field="date") from None
        raise DataFormatError(path, None, "cannot parse column date", field="date") from None
    if np.isnat(days).any():
        i = int(np.flatnonzero(np.isnat(days))[0])
        raise DataFormatError(path, numbers[i], f"date is not YYYY-MM-DD: {values[i]!r}", field="date")
    return days.astype(np.int64) * _DAY


def read_ciaodvd_ratings(path: str | Path) -> tuple[Ratings, int]:
    """Read the ratings file; returns (ratings in file order, number of repeated pairs dropped)."""
    p = Path(path)
    lines, numbers = read_rows(p)
    rows = split_fields(p, lines, numbers, ",", (6,))
    cols = list(zip(*rows)) if rows else [()] * 6
    ratings = Ratings(
        parse_ids(p, [c.strip() for c in cols[0]], numbers, "user_id"),
        parse_ids(p, [c.strip() for c in cols[1]], numbers, "item_id"),
        parse_numbers(p, list(cols[4]), numbers, "rating", np.float32),
        _dates(p, [c.strip() for c in cols[5]], numbers),
    )
    return _keep_latest(ratings, source=str(p))


def _keep_latest(ratings: Ratings, *, source: str) -> tuple[Ratings, int]:
    """Keep each (user, item) pair's latest rating by date (the later line on a tie), in file order."""
    if not len(ratings):
        return ratings, 0
    by_date = np.argsort(ratings.timestamps, kind="stable")
    latest_last = ratings.subset(by_date)
    _, dropped = dedupe_keep_last(latest_last, source=source)
    if not dropped:
        return ratings, 0
    key = np.char.add(np.char.add(latest_last.user_ids.astype(str), "\t"), latest_last.item_ids.astype(str))
    _, first_in_reversed = np.unique(key[::-1], return_index=True)
    keep = np.sort(by_date[len(key) - 1 - first_in_reversed])
    return ratings.subset(keep), dropped


def read_ciaodvd_trust(path: str | Path) -> SocialLinks:
    """Read the trust file (`trustor,trustee,value`, directed); self-loops are refused."""
    p = Path(path)
    lines, numbers = read_rows(p)
    if not lines:
        return empty_links()
    rows = split_fields(p, lines, numbers, ",", (3,))
    src_raw, dst_raw, w_raw = (list(c) for c in zip(*rows))
    src = parse_ids(p, [s.strip() for s in src_raw], numbers, "trustor")
    dst = parse_ids(p, [d.strip() for d in dst_raw], numbers, "trustee")
    weight = parse_numbers(p, w_raw, numbers, "value", np.float32)
    loops = np.flatnonzero(src == dst)
    if loops.size:
        raise DataFormatError(p, numbers[int(loops[0])], f"self-loop trust link for user {str(src[loops[0]])!r}")
    return SocialLinks(src, dst, weight)


def find_file(root: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` present in `root`."""
    return next((root / n for n in names if (root / n).is_file()), None)


def load_ciaodvd(path: str | Path, *, seed: int = 0, ratios: tuple[float, float, float] = (0.8, 0.1, 0.1),
                 social: bool = True) -> Dataset:
    """Load CiaoDVD from its directory: seeded random split, rating range read from the data."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"CiaoDVD directory not found: {root}")
    rating_file, trust_file = find_file(root, RATING_FILES), find_file(root, TRUST_FILES)
    if rating_file is None:
        raise FileNotFoundError(f"{root}: none of {', '.join(RATING_FILES)}")
    ratings, dropped = read_ciaodvd_ratings(rating_file)
    if not len(ratings):
        raise DataFormatError(rating_file, None, "no ratings")
    links = read_ciaodvd_trust(trust_file) if social and trust_file is not None else None
    train, valid, test = random_split(ratings, ratios, np.random.default_rng(seed))
    meta = {"split": "random", "ratios": ratios, "seed": seed, "duplicates_dropped": dropped}
    return Dataset("ciaodvd", train, test, valid, social=links, rating_min=float(ratings.ratings.min()),
                   rating_max=float(ratings.ratings.max()), meta=meta)
