"""Generic delimited rating and link files with a header row (read and write)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from services.data.parsing import (
    DataFormatError,
    dedupe_keep_last,
    empty_ratings,
    parse_ids,
    parse_numbers,
)
from services.data.types import Ratings, SocialLinks

RATINGS_HEADER = ("user_id", "item_id", "rating", "timestamp")
LINKS_HEADER = ("src", "dst", "weight")


def _read_columns(
    path: Path,
    wanted: dict[str, str | None],
    delimiter: str,
    encoding: str,
    optional: frozenset[str] = frozenset(),
) -> tuple[dict[str, list[str]], list[int]]:
    """Wanted columns (logical -> header name; None/absent optional skipped) and line numbers."""
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    with path.open(newline="", encoding=encoding) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            raise DataFormatError(path, 1, "empty file: a header row is required")
        header = [h.strip() for h in header]
        index: dict[str, int] = {}
        for logical, name in wanted.items():
            if name is None or (logical in optional and name not in header):
                continue
            if name not in header:
                raise DataFormatError(
                    path, 1, f"missing column {name!r} in header {header}", field=logical
                )
            index[logical] = header.index(name)
        cols: dict[str, list[str]] = {k: [] for k in index}
        numbers: list[int] = []
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise DataFormatError(
                    path,
                    reader.line_num,
                    f"expected {len(header)} fields, found {len(row)}: {delimiter.join(row)!r}",
                )
            for k, j in index.items():
                cols[k].append(row[j].strip())
            numbers.append(reader.line_num)
    return cols, numbers


def read_csv_ratings(
    path: str | Path,
    *,
    user_col: str = "user_id",
    item_col: str = "item_id",
    rating_col: str = "rating",
    timestamp_col: str | None = "timestamp",
    delimiter: str = ",",
    rating_range: tuple[float, float] | None = None,
    encoding: str = "utf-8",
) -> Ratings:
    """Read ratings from a delimited file with a header; timestamps are optional (0 if absent)."""
    p = Path(path)
    wanted = {
        "user_id": user_col,
        "item_id": item_col,
        "rating": rating_col,
        "timestamp": timestamp_col,
    }
    cols, numbers = _read_columns(p, wanted, delimiter, encoding, frozenset({"timestamp"}))
    if not numbers:
        return empty_ratings()
    ratings = Ratings(
        parse_ids(p, cols["user_id"], numbers, "user_id"),
        parse_ids(p, cols["item_id"], numbers, "item_id"),
        parse_numbers(p, cols["rating"], numbers, "rating", np.float32, rating_range),
        parse_numbers(p, cols["timestamp"], numbers, "timestamp", np.int64)
        if "timestamp" in cols
        else np.zeros(len(numbers), dtype=np.int64),
    )
    ratings, _ = dedupe_keep_last(ratings, source=str(p))
    return ratings


def read_csv_links(
    path: str | Path,
    *,
    src_col: str = "src",
    dst_col: str = "dst",
    weight_col: str | None = "weight",
    delimiter: str = ",",
    encoding: str = "utf-8",
) -> SocialLinks:
    """Read directed social links (src, dst[, weight]) from a delimited file with a header."""
    p = Path(path)
    cols, numbers = _read_columns(
        p, {"src": src_col, "dst": dst_col, "weight": weight_col}, delimiter, encoding
    )
    src = parse_ids(p, cols["src"], numbers, "src")
    dst = parse_ids(p, cols["dst"], numbers, "dst")
    weight = (
        parse_numbers(p, cols["weight"], numbers, "weight", np.float32)
        if weight_col
        else np.ones(len(numbers), dtype=np.float32)
    )
    return SocialLinks(src, dst, weight)


def _chunks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _format_number(values: np.ndarray) -> np.ndarray:
    """Shortest decimal text of float values ('4' for 4.0, '3.5' for 3.5)."""
    as_int = values.astype(np.int64)
    whole = as_int == values
    out = values.astype(str)  # float32 -> shortest round-trip text
    out[whole] = as_int[whole].astype(str)
    return out


def write_ratings_csv(path: str | Path, ratings: Ratings, *, chunk_rows: int = 500_000) -> int:
    """Write ratings as CSV (header user_id,item_id,rating,timestamp); returns the row count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8", newline="") as fh:
        fh.write(",".join(RATINGS_HEADER) + "\n")
        # Vectorised string building in chunks keeps memory flat for millions of rows.
        for s in _chunks(len(ratings), chunk_rows):
            cols = [
                ratings.user_ids[s].astype(str),
                ratings.item_ids[s].astype(str),
                _format_number(ratings.ratings[s]),
                ratings.timestamps[s].astype(str),
            ]
            fh.write("\n".join(",".join(row) for row in zip(*cols)) + "\n")
    return len(ratings)


def write_links_csv(path: str | Path, links: SocialLinks, *, chunk_rows: int = 500_000) -> int:
    """Write social links as CSV with header src,dst,weight; returns the number of rows."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = int(links.src.shape[0])
    with p.open("w", encoding="utf-8", newline="") as fh:
        fh.write(",".join(LINKS_HEADER) + "\n")
        for s in _chunks(n, chunk_rows):
            cols = [
                links.src[s].astype(str),
                links.dst[s].astype(str),
                _format_number(links.weight[s]),
            ]
            fh.write("\n".join(",".join(row) for row in zip(*cols)) + "\n")
    return n
