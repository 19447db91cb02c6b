"""Social recommendation data sets (ratings + social links) in any format the readers know.

Formats: `filmtrust` (ratings.txt + trust.txt), `ciaodvd` (movie-ratings.txt / ciao_ratings.txt +
trusts.txt / ciao_trusts.txt) and `csv` (a pair of CSV files with headers: ratings
`user_id,item_id,rating[,timestamp]` and links `src,dst[,weight]`; a directory holding ratings.csv and
links.csv, or the ratings file with the links file next to it or named). The rating range is the
data's own (min, max), never a data set constant.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from services.data.ciaodvd import RATING_FILES, TRUST_FILES, find_file, load_ciaodvd
from services.data.csv import read_csv_links, read_csv_ratings
from services.data.filmtrust import load_filmtrust
from services.data.splits import random_split
from services.data.types import Dataset

SOCIAL_FORMATS = ("filmtrust", "ciaodvd", "csv")
CSV_RATINGS, CSV_LINKS = "ratings.csv", "links.csv"


def detect_social_format(path: str | Path) -> str:
    """Tell a social data set's format from its file names."""
    p = Path(path)
    if p.is_file():
        if p.suffix == ".csv":
            return "csv"
        p = p.parent
    if not p.is_dir():
        raise FileNotFoundError(f"social data set not found: {path}")
    if (p / "ratings.txt").is_file() and (p / "trust.txt").is_file():
        return "filmtrust"
    if find_file(p, RATING_FILES) is not None and find_file(p, TRUST_FILES) is not None:
        return "ciaodvd"
    if (p / CSV_RATINGS).is_file() and (p / CSV_LINKS).is_file():
        return "csv"
    raise ValueError(f"cannot tell the social format of {p}: expected ratings.txt + trust.txt (filmtrust), "
                     f"{RATING_FILES[0]} + {TRUST_FILES[0]} (ciaodvd) or {CSV_RATINGS} + {CSV_LINKS} (csv)")


def _load_csv_pair(path: Path, links: Path | None, seed: int, ratios: tuple[float, float, float]) -> Dataset:
    ratings_file = path / CSV_RATINGS if path.is_dir() else path
    links_file = links or ratings_file.parent / CSV_LINKS
    ratings = read_csv_ratings(ratings_file)
    if not len(ratings):
        raise ValueError(f"{ratings_file}: no ratings")
    train, valid, test = random_split(ratings, ratios, np.random.default_rng(seed))
    return Dataset(ratings_file.stem if path.is_file() else path.name, train, test, valid,
                   social=read_csv_links(links_file), meta={"split": "random", "ratios": ratios, "seed": seed})


def load_social(path: str | Path, *, fmt: str | None = None, links: str | Path | None = None, seed: int = 0,
                ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> Dataset:
    """Ratings (seeded random train/valid/test split) and social links; rating range from the data."""
    p = Path(path)
    fmt = fmt or detect_social_format(p)
    if fmt == "filmtrust":
        ds = load_filmtrust(p if p.is_dir() else p.parent, seed=seed, ratios=ratios)
    elif fmt == "ciaodvd":
        ds = load_ciaodvd(p if p.is_dir() else p.parent, seed=seed, ratios=ratios)
    elif fmt == "csv":
        ds = _load_csv_pair(p, Path(links) if links is not None else None, seed, ratios)
    else:
        raise ValueError(f"unknown social format {fmt!r}; expected one of {SOCIAL_FORMATS}")
    parts = [ds.train.ratings, ds.test.ratings] + ([ds.valid.ratings] if ds.valid is not None else [])
    values = np.concatenate(parts)
    lo, hi = float(values.min()), float(values.max())
    return dataclasses.replace(ds, rating_min=lo, rating_max=hi if hi > lo else lo + 1.0,
                               meta={**ds.meta, "format": fmt, "source": str(p)})
