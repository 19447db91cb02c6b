"""Format detection and whole-data-set loading for the supported rating formats."""

from __future__ import annotations

from pathlib import Path

from services.data.ciaodvd import (
    RATING_FILES,
    TRUST_FILES,
    find_file,
    read_ciaodvd_ratings,
    read_ciaodvd_trust,
)
from services.data.csv import read_csv_ratings
from services.data.filmtrust import (
    FILMTRUST_RATING_RANGE,
    read_filmtrust_ratings,
    read_filmtrust_trust,
)
from services.data.movielens import read_ml1m_ratings, read_ml100k_ratings
from services.data.parsing import empty_ratings
from services.data.types import Dataset

FORMATS = ("ml-100k", "ml-1m", "filmtrust", "ciaodvd", "csv")


def detect_format(path: str | Path) -> str:
    """Guess the format of a data set path (a directory or a single file) from its file names."""
    p = Path(path)
    if p.is_dir():
        for marker, fmt in (
            ("u.data", "ml-100k"),
            ("ratings.dat", "ml-1m"),
            ("ratings.txt", "filmtrust"),
        ):
            if (p / marker).is_file():
                return fmt
        if find_file(p, RATING_FILES) is not None:
            return "ciaodvd"
        raise ValueError(
            f"cannot tell the format of directory {p}: no u.data, ratings.dat, ratings.txt or {RATING_FILES[0]}"
        )
    if not p.is_file():
        raise FileNotFoundError(f"data set not found: {p}")
    if p.name == "u.data" or p.suffix in {".base", ".test"}:
        return "ml-100k"
    if p.suffix == ".dat":
        return "ml-1m"
    if p.suffix == ".csv":
        return "csv"
    if p.name == "ratings.txt":
        return "filmtrust"
    if p.name in RATING_FILES:
        return "ciaodvd"
    raise ValueError(f"cannot tell the format of {p}; pass one of {FORMATS}")


def load_all(path: str | Path, fmt: str | None = None) -> Dataset:
    """Every rating of a data set in `train` (test empty), plus its social links if any."""
    p = Path(path)
    fmt = fmt or detect_format(p)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    social = None
    lo, hi = 1.0, 5.0
    if fmt == "ml-100k":
        ratings = read_ml100k_ratings(p / "u.data" if p.is_dir() else p)
    elif fmt == "ml-1m":
        ratings = read_ml1m_ratings(p / "ratings.dat" if p.is_dir() else p)
    elif fmt == "filmtrust":
        root = p if p.is_dir() else p.parent
        ratings, _ = read_filmtrust_ratings(root / "ratings.txt")
        if (root / "trust.txt").is_file():
            social = read_filmtrust_trust(root / "trust.txt")
        lo, hi = FILMTRUST_RATING_RANGE
    elif fmt == "ciaodvd":
        root = p if p.is_dir() else p.parent
        ratings, _ = read_ciaodvd_ratings(find_file(root, RATING_FILES) or root / RATING_FILES[0])
        trust = find_file(root, TRUST_FILES)
        social = read_ciaodvd_trust(trust) if trust is not None else None
        lo, hi = float(ratings.ratings.min()), float(ratings.ratings.max())
    else:
        ratings = read_csv_ratings(p)
        if len(ratings):
            lo, hi = float(ratings.ratings.min()), float(ratings.ratings.max())
            hi = hi if hi > lo else lo + 1.0
    name = p.name if fmt == "csv" else fmt
    return Dataset(
        name,
        ratings,
        empty_ratings(),
        None,
        social=social,
        rating_min=lo,
        rating_max=hi,
        meta={"format": fmt, "source": str(p)},
    )
