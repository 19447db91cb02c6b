"""Reader for FilmTrust (LibRec distribution): ratings.txt (0.5..4.0) and directed trust.txt."""

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

FILMTRUST_RATING_RANGE = (0.5, 4.0)


def read_filmtrust_ratings(path: str | Path) -> tuple[Ratings, int]:
    """Read ratings.txt (`user item rating`, space-separated); returns (ratings, n_duplicates).

    The public file repeats 3 (user, item) pairs; the last rating of each is kept, with a warning.
    """
    p = Path(path)
    lines, numbers = read_rows(p)
    rows = split_fields(p, lines, numbers, None, (3,))
    cols = list(zip(*rows)) if rows else [(), (), ()]
    ratings = Ratings(
        parse_ids(p, list(cols[0]), numbers, "user_id"),
        parse_ids(p, list(cols[1]), numbers, "item_id"),
        parse_numbers(p, list(cols[2]), numbers, "rating", np.float32, FILMTRUST_RATING_RANGE),
        np.zeros(len(rows), dtype=np.int64),  # FilmTrust has no timestamps
    )
    return dedupe_keep_last(ratings, source=str(p))


def read_filmtrust_trust(path: str | Path) -> SocialLinks:
    """Read trust.txt (`trustor trustee value`, directed) into SocialLinks; no self-loops."""
    p = Path(path)
    lines, numbers = read_rows(p)
    if not lines:
        return empty_links()
    rows = split_fields(p, lines, numbers, None, (3,))
    src_raw, dst_raw, w_raw = (list(c) for c in zip(*rows))
    src = parse_ids(p, src_raw, numbers, "trustor")
    dst = parse_ids(p, dst_raw, numbers, "trustee")
    weight = parse_numbers(p, w_raw, numbers, "value", np.float32)
    loops = np.flatnonzero(src == dst)
    if loops.size:
        raise DataFormatError(
            p, numbers[int(loops[0])], f"self-loop trust link for user {str(src[loops[0]])!r}"
        )
    return SocialLinks(src, dst, weight)


def load_filmtrust(
    path: str | Path,
    *,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.6, 0.2, 0.2),
    social: bool = True,
) -> Dataset:
    """Load FilmTrust from its directory: seeded random split, optional trust links."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"FilmTrust directory not found: {root}")
    ratings, dropped = read_filmtrust_ratings(root / "ratings.txt")
    links = read_filmtrust_trust(root / "trust.txt") if social else None
    train, valid, test = random_split(ratings, ratios, np.random.default_rng(seed))
    lo, hi = FILMTRUST_RATING_RANGE
    meta = {"split": "random", "ratios": ratios, "seed": seed, "duplicates_dropped": dropped}
    return Dataset(
        "filmtrust", train, test, valid, social=links, rating_min=lo, rating_max=hi, meta=meta
    )
