"""Side information: feature files (CSV, ML-100K u.user / u.item), their checks, and the model's attribute tokens.

A feature row is (entity id, column, text value, numeric value): a categorical column gives text, a
numeric one a number; a multi-valued categorical (ML-100K genres) gives one row per value.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from services.data.parsing import DataFormatError

FeatureKind = Literal["user-features", "item-features"]
FEATURE_KINDS: tuple[FeatureKind, ...] = ("user-features", "item-features")
NAME_MAX = 64
VALUE_MAX = 255


@dataclass(frozen=True)
class FeatureRow:
    """One attribute value of one user or item."""

    entity_id: str
    name: str
    text: str | None = None  # categorical value
    number: float | None = None  # numeric value


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value


def read_feature_csv(path: str | Path, *, id_column: str, max_categories: int,
                     categorical: Sequence[str] = ()) -> list[FeatureRow]:
    """Rows of a CSV with a header: `id_column` plus categorical and numeric columns (empty cell: no value).

    A column is numeric when every non-empty cell is a finite number, categorical when none is (or it is
    named in `categorical`); a column that mixes the two, a categorical with more than `max_categories`
    distinct values, an unknown id column or a repeated id is refused (DataFormatError, nothing read).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"feature file not found: {p}")
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise DataFormatError(p, 1, "no header row", field="header")
        header = [h.strip() for h in header]
        lines = [(n + 2, row) for n, row in enumerate(reader) if any(c.strip() for c in row)]
    if id_column not in header:
        raise DataFormatError(p, 1, f"unknown id column {id_column!r} (columns: {', '.join(header)})",
                              field="id_column")
    unknown = sorted(set(categorical) - set(header))
    if unknown:
        raise DataFormatError(p, 1, f"--categorical names unknown column {unknown[0]!r}", field="categorical")
    at = header.index(id_column)
    seen: set[str] = set()
    for line, row in lines:
        if len(row) != len(header):
            raise DataFormatError(p, line, f"expected {len(header)} fields, found {len(row)}", field="row")
        entity = row[at].strip()
        if not entity or len(entity) > VALUE_MAX:
            raise DataFormatError(p, line, f"empty or over-long id in column {id_column!r}", field=id_column)
        if entity in seen:
            raise DataFormatError(p, line, f"id {entity!r} appears twice", field=id_column)
        seen.add(entity)
    out: list[FeatureRow] = []
    for k, name in enumerate(header):
        if k != at:
            out.extend(_column(p, name, [(line, row[at].strip(), row[k].strip()) for line, row in lines],
                               forced_text=name in categorical))
    check_rows(out, max_categories=max_categories, source=str(p))
    return out


def _column(path: Path, name: str, cells: list[tuple[int, str, str]], *, forced_text: bool) -> list[FeatureRow]:
    """One column's rows: numeric or categorical, refusing a mix (names the first line that breaks it)."""
    if not name or len(name) > NAME_MAX:
        raise DataFormatError(path, 1, f"column name {name[:NAME_MAX]!r} is empty or over {NAME_MAX} characters",
                              field="header")
    filled = [(line, entity, cell) for line, entity, cell in cells if cell]
    numbers = [_number(cell) for _, _, cell in filled]
    if forced_text or all(v is None for v in numbers):
        for line, _, cell in filled:
            if len(cell) > VALUE_MAX:
                raise DataFormatError(path, line, f"column {name!r}: value over {VALUE_MAX} characters", field=name)
        return [FeatureRow(entity, name, text=cell) for _, entity, cell in filled]
    for (line, _, cell), v in zip(filled, numbers):
        if v is None or not math.isfinite(v):
            first = next(c for (_, _, c), x in zip(filled, numbers) if x is not None and math.isfinite(x))
            raise DataFormatError(path, line, f"column {name!r} mixes types: {cell!r} is not a number but {first!r} "
                                  "is (name the column with --categorical to read it as text)", field=name)
    return [FeatureRow(entity, name, number=v) for (_, entity, _), v in zip(filled, numbers)]


def check_rows(rows: Iterable[FeatureRow], *, max_categories: int, source: str = "features") -> None:
    """Refuse (DataFormatError) a column that mixes text and numbers or a categorical over `max_categories`."""
    text: dict[str, set[str]] = {}
    numeric: set[str] = set()
    for r in rows:
        if r.text is not None:
            text.setdefault(r.name, set()).add(r.text)
        else:
            numeric.add(r.name)
    for name, values in sorted(text.items()):
        if name in numeric:
            raise DataFormatError(source, None, f"column {name!r} mixes types: text and numbers", field=name)
        if len(values) > max_categories:
            raise DataFormatError(source, None, f"column {name!r} has {len(values)} distinct values, over the cap "
                                  f"of {max_categories} (--max-categories)", field=name)


def read_ml100k_users(path: str | Path) -> list[FeatureRow]:
    """ML-100K u.user (`id|age|gender|occupation|zip`): age numeric; gender, occupation and the zip code's
    first character (a region: whole codes are near-unique) categorical."""
    out: list[FeatureRow] = []
    for line, fields in _pipe_rows(path, 5):
        uid, age, gender, occupation, zipcode = (f.strip() for f in fields)
        value = _number(age)
        if not uid or value is None:
            raise DataFormatError(path, line, f"expected id|age|gender|occupation|zip, found {'|'.join(fields)!r}",
                                  field="age")
        out += [FeatureRow(uid, "age", number=value), FeatureRow(uid, "gender", text=gender),
                FeatureRow(uid, "occupation", text=occupation)]
        if zipcode:
            out.append(FeatureRow(uid, "zip_region", text=zipcode[0].upper()))
    return out


_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
           "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western")
_YEAR = re.compile(r"(\d{4})\s*$")


def read_ml100k_items(path: str | Path) -> list[FeatureRow]:
    """ML-100K u.item (`id|title|release date|video date|url|19 genre flags`): the release year numeric and the
    genres as one multi-valued categorical column."""
    out: list[FeatureRow] = []
    for line, fields in _pipe_rows(path, 5 + len(_GENRES)):
        iid, flags = fields[0].strip(), fields[5:]
        if not iid or any(f.strip() not in ("0", "1") for f in flags):
            raise DataFormatError(path, line, "expected an id and 19 genre flags (0/1)", field="genre")
        year = _YEAR.search(fields[2].strip())
        if year:
            out.append(FeatureRow(iid, "year", number=float(year.group(1))))
        out += [FeatureRow(iid, "genre", text=g) for g, f in zip(_GENRES, flags) if f.strip() == "1"]
    return out


def _pipe_rows(path: str | Path, n_fields: int) -> list[tuple[int, list[str]]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"feature file not found: {p}")
    out = []
    for n, raw in enumerate(p.read_text(encoding="latin-1").splitlines(), start=1):
        if raw.strip():
            fields = raw.split("|")
            if len(fields) != n_fields:
                raise DataFormatError(p, n, f"expected {n_fields} '|'-separated fields, found {len(fields)}",
                                      field="row")
            out.append((n, fields))
    return out


def read_features(path: str | Path, *, kind: FeatureKind, fmt: str, id_column: str, max_categories: int,
                  categorical: Sequence[str] = ()) -> list[FeatureRow]:
    """A feature file in format `fmt` (csv, ml100k) for `kind`; checked against `max_categories`."""
    if fmt == "ml100k":
        rows = read_ml100k_users(path) if kind == "user-features" else read_ml100k_items(path)
        check_rows(rows, max_categories=max_categories, source=str(path))
        return rows
    if fmt == "csv":
        return read_feature_csv(path, id_column=id_column, max_categories=max_categories, categorical=categorical)
    raise ValueError(f"unknown feature format {fmt!r} (csv, ml100k)")


def side_information(dataset: str, path: str | Path) -> tuple[list[FeatureRow], list[FeatureRow]] | None:
    """(user rows, item rows) of a data set's own side information; None when it has none."""
    root = Path(path)
    if dataset == "ml100k" and (root / "u.user").is_file() and (root / "u.item").is_file():
        return read_ml100k_users(root / "u.user"), read_ml100k_items(root / "u.item")
    return None
