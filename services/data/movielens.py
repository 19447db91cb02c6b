"""Readers for MovieLens-100K (u.data, official u1..u5/ua/ub splits) and MovieLens-1M."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.data.parsing import (
    DataFormatError,
    dedupe_keep_last,
    empty_ratings,
    parse_ids,
    parse_numbers,
    read_rows,
    split_fields,
)
from services.data.splits import random_split
from services.data.types import Dataset, Ratings

ML100K_SPLITS = ("u1", "u2", "u3", "u4", "u5", "ua", "ub")
ML_RATING_RANGE = (1.0, 5.0)


def _parse(path: Path, sep: str) -> Ratings:
    """Parse `user sep item sep rating sep timestamp` lines into Ratings."""
    lines, numbers = read_rows(path)
    rows = split_fields(path, lines, numbers, sep, (4,))
    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    ratings = Ratings(
        parse_ids(path, list(cols[0]), numbers, "user_id"),
        parse_ids(path, list(cols[1]), numbers, "item_id"),
        parse_numbers(path, list(cols[2]), numbers, "rating", np.float32, ML_RATING_RANGE),
        parse_numbers(path, list(cols[3]), numbers, "timestamp", np.int64),
    )
    if len(ratings) == 0:
        return empty_ratings()
    return ratings


def read_ml100k_ratings(path: str | Path) -> Ratings:
    """Read one MovieLens-100K file (u.data, uN.base, uN.test): TAB-separated u i r ts."""
    ratings, _ = dedupe_keep_last(_parse(Path(path), "\t"), source=str(path))
    return ratings


def read_ml1m_ratings(path: str | Path) -> Ratings:
    """Read MovieLens-1M ratings.dat: `user::item::rating::timestamp` per line."""
    ratings = _parse(Path(path), "::")
    ratings, _ = dedupe_keep_last(ratings, source=str(path))
    return ratings


def load_ml100k(
    path: str | Path,
    split: str | None = "u1",
    *,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> Dataset:
    """Load MovieLens-100K: an official split, or (split=None) a seeded random split of u.data."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"MovieLens-100K directory not found: {root}")
    if split is None:
        train, valid, test = random_split(
            read_ml100k_ratings(root / "u.data"), ratios, np.random.default_rng(seed)
        )
        return Dataset(
            "ml-100k",
            train,
            test,
            valid,
            rating_min=1.0,
            rating_max=5.0,
            meta={"split": "random", "ratios": ratios, "seed": seed},
        )
    if split not in ML100K_SPLITS:
        raise ValueError(f"split must be one of {ML100K_SPLITS} or None, got {split!r}")
    train = read_ml100k_ratings(root / f"{split}.base")
    test = read_ml100k_ratings(root / f"{split}.test")
    return Dataset(
        "ml-100k", train, test, None, rating_min=1.0, rating_max=5.0, meta={"split": split}
    )


def load_ml1m(
    path: str | Path,
    *,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> Dataset:
    """Load MovieLens-1M (directory or ratings.dat) with a seeded random train/valid/test split."""
    p = Path(path)
    file = p / "ratings.dat" if p.is_dir() else p
    train, valid, test = random_split(read_ml1m_ratings(file), ratios, np.random.default_rng(seed))
    return Dataset(
        "ml-1m",
        train,
        test,
        valid,
        rating_min=1.0,
        rating_max=5.0,
        meta={"split": "random", "ratios": ratios, "seed": seed},
    )


def read_ml100k_genres(path: str | Path) -> dict[str, str]:
    """Primary genre of each MovieLens-100K movie: the first genre flag set in u.item (u.genre order)."""
    root = Path(path)
    root = root if root.is_dir() else root.parent
    names = [line.split("|")[0] for line in _latin1_lines(root / "u.genre") if line.strip()]
    out: dict[str, str] = {}
    for number, line in enumerate(_latin1_lines(root / "u.item"), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        flags = fields[5:]
        if len(flags) != len(names):
            raise DataFormatError(root / "u.item", number, f"{len(flags)} genre flags, expected {len(names)}")
        first = next((g for g, f in zip(names, flags) if f.strip() == "1"), "unknown")
        out[fields[0].strip()] = first
    return out


def read_ml1m_genres(path: str | Path) -> dict[str, str]:
    """Primary genre of each MovieLens-1M movie: the first genre listed in movies.dat (`id::title::A|B`)."""
    p = Path(path)
    file = p / "movies.dat" if p.is_dir() else p.parent / "movies.dat"
    out: dict[str, str] = {}
    for number, line in enumerate(_latin1_lines(file), start=1):
        if not line.strip():
            continue
        fields = line.split("::")
        if len(fields) != 3:
            raise DataFormatError(file, number, "expected movie::title::genres")
        out[fields[0].strip()] = fields[2].strip().split("|")[0] or "unknown"
    return out


def _latin1_lines(path: Path) -> list[str]:
    """Lines of a MovieLens metadata file (Latin-1 encoded, unlike the rating files' ASCII)."""
    if not path.is_file():
        raise FileNotFoundError(f"MovieLens genre file not found: {path}")
    return path.read_text(encoding="latin-1").splitlines()


__all__ = [
    "ML100K_SPLITS",
    "DataFormatError",
    "load_ml1m",
    "load_ml100k",
    "read_ml1m_genres",
    "read_ml1m_ratings",
    "read_ml100k_genres",
    "read_ml100k_ratings",
]
