"""Shared parsing helpers for rating files: a located error type, column parsing, de-duplication."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.data.types import Ratings, SocialLinks
from services.errors import ValidationFailed


class DataFormatError(ValidationFailed, ValueError):
    """A data file is malformed; the message names the file, the line and the reason."""

    def __init__(
        self, path: str | Path, line: int | None, reason: str, *, field: str | None = None
    ) -> None:
        where = f"{path}" if line is None else f"{path}, line {line}"
        super().__init__(
            f"{where}: {reason}", extra={"path": str(path), "line": line, "field": field}
        )
        self.path = str(path)
        self.line = line
        self.field = field


def empty_ratings() -> Ratings:
    """A Ratings table with no rows and the canonical dtypes."""
    return Ratings(
        np.array([], dtype=str),
        np.array([], dtype=str),
        np.array([], dtype=np.float32),
        np.array([], dtype=np.int64),
    )


def empty_links() -> SocialLinks:
    """A SocialLinks table with no rows."""
    return SocialLinks(
        np.array([], dtype=str), np.array([], dtype=str), np.array([], dtype=np.float32)
    )


def read_rows(path: str | Path, *, encoding: str = "ascii") -> tuple[list[str], list[int]]:
    """Non-blank lines of a text file with their 1-based line numbers."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {p}")
    try:
        text = p.read_text(encoding=encoding)
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataFormatError(p, line, f"not valid {encoding} text") from exc
    lines = text.splitlines()
    numbers = [i + 1 for i, line in enumerate(lines) if line.strip()]
    if len(numbers) != len(lines):
        lines = [lines[n - 1] for n in numbers]
    return lines, numbers


def split_fields(
    path: str | Path, lines: list[str], numbers: list[int], sep: str | None, n_fields: Sequence[int]
) -> list[list[str]]:
    """Split each line on `sep` (None = any whitespace) and check the field count."""
    rows = [line.strip().split(sep) for line in lines]
    allowed = set(n_fields)
    bad = next((i for i, row in enumerate(rows) if len(row) not in allowed), None)
    if bad is not None:
        want = " or ".join(str(n) for n in sorted(allowed))
        raise DataFormatError(
            path, numbers[bad], f"expected {want} fields, found {len(rows[bad])}: {lines[bad]!r}"
        )
    return rows


def parse_ids(path: str | Path, values: list[str], numbers: list[int], field: str) -> np.ndarray:
    """Identifier column as a numpy str array; empty ids are rejected."""
    bad = next((i for i, v in enumerate(values) if not v), None)
    if bad is not None:
        raise DataFormatError(path, numbers[bad], f"empty {field}", field=field)
    return np.array(values, dtype=str)


def parse_numbers(
    path: str | Path,
    values: list[str],
    numbers: list[int],
    field: str,
    dtype: type[np.floating | np.integer],
    bounds: tuple[float, float] | None = None,
) -> np.ndarray:
    """Numeric column; the first unparsable, non-finite or out-of-range value is reported."""
    try:
        out = np.array(values, dtype=np.float64 if dtype is not np.int64 else np.int64)
    except (ValueError, OverflowError):
        out = None
    if out is None:
        # Vectorised cast failed: find the culprit row for a precise message.
        for value, line in zip(values, numbers):
            try:
                float(value) if dtype is not np.int64 else int(value)
            except (ValueError, OverflowError):
                raise DataFormatError(
                    path, line, f"{field} is not a number: {value!r}", field=field
                ) from None
        raise DataFormatError(path, None, f"cannot parse column {field}", field=field)
    bad_mask = ~np.isfinite(out) if out.dtype.kind == "f" else np.zeros(out.shape, dtype=bool)
    if bounds is not None:
        bad_mask |= (out < bounds[0]) | (out > bounds[1])
    if bad_mask.any():
        i = int(np.flatnonzero(bad_mask)[0])
        reason = (
            f"{field} {values[i]!r} outside [{bounds[0]}, {bounds[1]}]"
            if bounds
            else f"{field} {values[i]!r} is not finite"
        )
        raise DataFormatError(path, numbers[i], reason, field=field)
    return out.astype(dtype)


def dedupe_keep_last(ratings: Ratings, *, source: str) -> tuple[Ratings, int]:
    """Drop repeated (user, item) pairs keeping the last occurrence; warn when any were dropped."""
    n = len(ratings)
    if n == 0:
        return ratings, 0
    _, u = np.unique(ratings.user_ids, return_inverse=True)
    _, i = np.unique(ratings.item_ids, return_inverse=True)
    key = u.astype(np.int64) * (int(i.max()) + 1) + i
    # Unique over the reversed keys finds each pair's last row.
    _, first_in_reversed = np.unique(key[::-1], return_index=True)
    keep = np.sort(n - 1 - first_in_reversed)
    dropped = n - keep.size
    if dropped:
        warnings.warn(
            f"{source}: {dropped} duplicated (user, item) pairs; kept the last rating of each",
            stacklevel=3,
        )
        ratings = ratings.subset(keep)
    return ratings, dropped


def concat_ratings(parts: Sequence[Ratings]) -> Ratings:
    """Row-wise concatenation of several Ratings tables."""
    if not parts:
        return empty_ratings()
    return Ratings(
        np.concatenate([p.user_ids for p in parts]).astype(str),
        np.concatenate([p.item_ids for p in parts]).astype(str),
        np.concatenate([p.ratings for p in parts]).astype(np.float32),
        np.concatenate([p.timestamps for p in parts]).astype(np.int64),
    )
