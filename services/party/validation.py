"""Parse and validate ingestion rows (CSV, NDJSON, JSON) into column batches, naming bad rows."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice, repeat
from typing import Any, TextIO

import numpy as np

from services.errors import ValidationFailed
from services.protocol.ids import id_problem

MAX_ERRORS = 20
BLOCK_CHARS_PER_ROW = 24  # block size of the unquoted CSV fast path, per requested row
MAX_LINE_CHARS = 1 << 20  # a longer line is refused rather than buffered
MAX_HEADER_CHARS = 4096  # a header names at most four short columns
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # timestamps are stored as 64-bit integers


@dataclass(frozen=True)
class RowSpec:
    """Allowed columns of one kind of row: two id columns, a value column, an optional timestamp."""

    kind: str
    left: str
    right: str
    value: str
    value_default: float | None  # None: the value column is required
    timestamp: str | None
    value_alias: str | None = None  # another name the value column may carry (never both in one row)


INTERACTIONS = RowSpec("interactions", "user_id", "item_id", "rating", None, "timestamp")
# An implicit-feedback party: each row an interaction with an optional weight (count, plays, ...). A
# `rating` column is read as the weight, so interaction files written with rating 1.0 ingest unchanged.
IMPLICIT_INTERACTIONS = RowSpec("interactions", "user_id", "item_id", "weight", 1.0, "timestamp", "rating")
SOCIAL_LINKS = RowSpec("social_links", "src_user_id", "dst_user_id", "weight", 1.0, None)


@dataclass(frozen=True)
class RowError:
    """One rejected row: 1-based data row number (0 = header), the field, and why."""

    row: int
    field: str | None
    reason: str


class ErrorLog:
    """Collects row errors up to a cap and raises them as one ValidationFailed."""

    def __init__(self, limit: int = MAX_ERRORS) -> None:
        self.limit = limit
        self.errors: list[RowError] = []
        self.total = 0

    @property
    def full(self) -> bool:
        """True once no further error would be listed."""
        return self.total >= self.limit

    def add(self, row: int, field: str | None, reason: str) -> None:
        """Record one error (listed only while under the cap)."""
        self.total += 1
        if len(self.errors) < self.limit:
            self.errors.append(RowError(int(row), field, reason))

    def raise_if_any(self) -> None:
        """Raise ValidationFailed listing the errors, sorted by row, if there are any."""
        if not self.total:
            return
        errors = sorted(self.errors, key=lambda e: e.row)
        first = errors[0]
        more = f" ({self.total} errors in all)" if self.total > 1 else ""
        if self.full:
            more = f" ({self.total} errors found, then stopped looking)"
        where = "header" if first.row == 0 else f"row {first.row}"
        raise ValidationFailed(
            f"batch rejected, nothing stored: {where}: {first.reason}{more}",
            extra={"errors": [e.__dict__ for e in errors], "error_count": self.total},
        )


@dataclass
class Batch:
    """Parsed rows in columns; `rows` holds the 1-based row number of each entry."""

    left: Sequence[str]
    right: Sequence[str]
    values: np.ndarray  # float64
    timestamps: Sequence[int | None] | None
    rows: np.ndarray  # int64
    bad: np.ndarray | None = None  # rows already reported (a cell failed to parse)

    def __len__(self) -> int:
        return len(self.left)


def check_header(spec: RowSpec, header: Sequence[str], errors: ErrorLog) -> dict[str, int]:
    """Map column names to positions; unknown, duplicate or missing columns are header errors."""
    allowed = ([spec.left, spec.right, spec.value] + ([spec.value_alias] if spec.value_alias else [])
               + ([spec.timestamp] if spec.timestamp else []))
    positions: dict[str, int] = {}
    for pos, name in enumerate(header):
        if name not in allowed:
            errors.add(0, name, f"unknown column {name!r}; allowed: {', '.join(allowed)}")
        elif name in positions:
            errors.add(0, name, f"duplicate column {name!r}")
        positions[name] = pos
    if spec.value_alias and spec.value_alias in positions:
        if spec.value in positions:
            errors.add(0, spec.value_alias, f"columns {spec.value!r} and {spec.value_alias!r} are the same value "
                                            "here; send one of them")
        positions[spec.value] = positions.pop(spec.value_alias)
    required = [spec.left, spec.right] + ([spec.value] if spec.value_default is None else [])
    for name in required:
        if name not in positions:
            errors.add(0, name, f"missing required column {name!r}")
    errors.raise_if_any()
    return positions


def csv_batches(
    text: TextIO, spec: RowSpec, *, batch_rows: int, errors: ErrorLog
) -> Iterator[Batch]:
    """Stream CSV rows (header first) as batches of roughly batch_rows rows."""
    header_line = text.readline(MAX_HEADER_CHARS + 1)
    if not header_line.strip():
        errors.add(0, None, "empty body: expected a header row")
        errors.raise_if_any()
    if len(header_line) > MAX_HEADER_CHARS:
        errors.add(0, None, f"header line longer than {MAX_HEADER_CHARS} characters")
        errors.raise_if_any()
    try:
        header = next(csv.reader([header_line], strict=True))
    except csv.Error as exc:
        errors.add(0, None, f"malformed CSV header: {exc}")
        errors.raise_if_any()
        raise  # unreachable: raise_if_any raised
    positions = check_header(spec, header, errors)
    first, width = 1, len(header)
    while not errors.full:
        block = text.read(batch_rows * BLOCK_CHARS_PER_ROW)
        if not block:
            return
        if not block.endswith("\n"):
            tail = text.readline(MAX_LINE_CHARS)
            if len(tail) == MAX_LINE_CHARS and not tail.endswith("\n"):
                errors.add(
                    first + block.count("\n"), None, f"row longer than {MAX_LINE_CHARS} characters"
                )
                errors.raise_if_any()
            block += tail
        if '"' in block or "\r" in block:
            # Quoting or CR line ends: hand this block and the rest to the csv module.
            rest = chain(io.StringIO(block, newline=""), text)
            yield from _quoted_batches(rest, first, positions, width, spec, batch_rows, errors)
            return
        lines = block[:-1].split("\n") if block.endswith("\n") else block.split("\n")
        yield _plain_columns(lines, first, positions, width, spec, errors)
        first += len(lines)


def _plain_columns(
    lines: list[str],
    first: int,
    positions: dict[str, int],
    width: int,
    spec: RowSpec,
    errors: ErrorLog,
) -> Batch:
    """Columns of unquoted lines by splitting the joined block once (no per-row objects)."""
    numbers = np.arange(first, first + len(lines), dtype=np.int64)
    commas = width - 1
    if set(map(str.count, lines, repeat(","))) != {commas}:
        good = np.fromiter((line.count(",") == commas for line in lines), bool, count=len(lines))
        for k in np.flatnonzero(~good)[: errors.limit].tolist():
            got = lines[k].count(",") + 1 if lines[k] else 0
            errors.add(first + k, None, f"expected {width} fields, got {got}")
        lines = [line for line, ok in zip(lines, good.tolist()) if ok]
        numbers = numbers[good]
    flat = ",".join(lines).split(",") if lines else []
    return _columns([flat[k::width] for k in range(width)], numbers, positions, spec, errors)


def _quoted_batches(
    lines: Iterator[str],
    first: int,
    positions: dict[str, int],
    width: int,
    spec: RowSpec,
    batch_rows: int,
    errors: ErrorLog,
) -> Iterator[Batch]:
    """The csv module's full dialect handling, for bodies that quote fields."""
    reader = csv.reader(lines, strict=True)
    start = first
    try:
        while not errors.full:
            rows = list(islice(reader, batch_rows))
            if not rows:
                return
            yield _csv_columns(rows, first, positions, width, spec, errors)
            first += len(rows)
    except csv.Error as exc:
        # The reader cannot resynchronise after broken quoting: report where and stop.
        errors.add(start + max(reader.line_num - 1, 0), None, f"malformed CSV: {exc}")
        errors.raise_if_any()


def _csv_columns(
    rows: list[list[str]],
    first: int,
    positions: dict[str, int],
    width: int,
    spec: RowSpec,
    errors: ErrorLog,
) -> Batch:
    """Columns of one CSV chunk; rows with the wrong field count are reported and dropped."""
    numbers = np.arange(first, first + len(rows), dtype=np.int64)
    if set(map(len, rows)) != {width}:
        good = np.fromiter((len(r) == width for r in rows), bool, count=len(rows))
        for k in np.flatnonzero(~good)[: errors.limit].tolist():
            errors.add(first + k, None, f"expected {width} fields, got {len(rows[k])}")
        rows = [r for r, ok in zip(rows, good.tolist()) if ok]
        numbers = numbers[good]
    cols: list[Sequence[str]] = list(zip(*rows)) if rows else [()] * width
    return _columns(cols, numbers, positions, spec, errors)


def _columns(
    cols: list[Sequence[str]],
    numbers: np.ndarray,
    positions: dict[str, int],
    spec: RowSpec,
    errors: ErrorLog,
) -> Batch:
    """Typed columns from string columns; cells that fail to parse are reported and marked."""
    bad = np.zeros(len(numbers), dtype=bool)
    if spec.value in positions:
        values = _floats(cols[positions[spec.value]], spec.value, numbers, errors, bad)
    else:
        values = np.full(len(numbers), spec.value_default, dtype=np.float64)
    ts = None
    if spec.timestamp and spec.timestamp in positions:
        ts = _ints(cols[positions[spec.timestamp]], spec.timestamp, numbers, errors, bad)
    left, right = cols[positions[spec.left]], cols[positions[spec.right]]
    return Batch(left, right, values, ts, numbers, bad if bad.any() else None)


def _floats(
    col: Sequence[str], field: str, rows: np.ndarray, errors: ErrorLog, bad: np.ndarray
) -> np.ndarray:
    """Vectorised float parse; on failure, find and report the bad cells one by one."""
    try:
        return np.array(col, dtype=np.float64)
    except ValueError:
        out = np.empty(len(col), dtype=np.float64)
        for k, cell in enumerate(col):
            try:
                out[k] = float(cell)
            except ValueError:
                out[k] = np.nan
                bad[k] = True
                errors.add(int(rows[k]), field, f"{cell!r} is not a number")
        return out


def _ints(
    col: Sequence[str], field: str, rows: np.ndarray, errors: ErrorLog, bad: np.ndarray
) -> list[int | None]:
    """Integer parse of a column; bad cells are reported and become None."""
    try:
        return np.array(col, dtype=np.int64).tolist()  # type: ignore[no-any-return]
    except (ValueError, OverflowError):
        out: list[int | None] = []
        for k, cell in enumerate(col):
            try:
                number = int(cell)
            except ValueError:
                number = None
            if number is None or not INT64_MIN <= number <= INT64_MAX:
                out.append(None)
                bad[k] = True
                errors.add(int(rows[k]), field, f"{cell[:40]!r} is not a 64-bit integer")
            else:
                out.append(number)
        return out


def ndjson_batches(
    text: Iterable[str], spec: RowSpec, *, batch_rows: int, errors: ErrorLog
) -> Iterator[Batch]:
    """Stream NDJSON objects (one per line; blank lines are errors) as batches."""
    lines = iter(text)
    first = 1
    while not errors.full:
        chunk = list(islice(lines, batch_rows))
        if not chunk:
            return
        records: list[Any] = []
        for k, line in enumerate(chunk):
            try:
                records.append(json.loads(line))
            except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError on bytes input
                records.append(None)
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                errors.add(first + k, None, f"invalid JSON: {reason}")
            except RecursionError:  # a line nested thousands deep
                records.append(None)
                errors.add(first + k, None, "invalid JSON: nested too deeply")
        yield records_batch(records, spec, errors=errors, first=first)
        first += len(chunk)


def records_batch(
    records: Sequence[Any], spec: RowSpec, *, errors: ErrorLog, first: int = 1
) -> Batch:
    """Columns from dict records (NDJSON lines or a JSON batch); bad records are reported."""
    allowed = ({spec.left, spec.right, spec.value} | ({spec.timestamp} if spec.timestamp else set())
               | ({spec.value_alias} if spec.value_alias else set()))
    required = {spec.left, spec.right} | ({spec.value} if spec.value_default is None else set())
    left: list[str] = []
    right: list[str] = []
    values: list[float] = []
    stamps: list[int | None] = []
    numbers: list[int] = []
    for k, rec in enumerate(records):
        row = first + k
        if rec is None:
            continue  # already reported
        parsed = _record(rec, row, spec, allowed, required, errors)
        if parsed is not None:
            left.append(parsed[0])
            right.append(parsed[1])
            values.append(parsed[2])
            stamps.append(parsed[3])
            numbers.append(row)
    ts = stamps if spec.timestamp else None
    return Batch(
        left, right, np.array(values, dtype=np.float64), ts, np.array(numbers, dtype=np.int64)
    )


def _record(
    rec: Any, row: int, spec: RowSpec, allowed: set[str], required: set[str], errors: ErrorLog
) -> tuple[str, str, float, int | None] | None:
    """One dict record checked field by field; None (and errors logged) when it is bad."""
    if not isinstance(rec, Mapping):
        errors.add(row, None, "expected a JSON object")
        return None
    bad = False
    for name in sorted(set(rec) - allowed):
        errors.add(row, str(name), f"unknown field {name!r}")
        bad = True
    for name in sorted(required - set(rec)):
        errors.add(row, name, f"missing required field {name!r}")
        bad = True
    if bad:
        return None
    ids = []
    for name in (spec.left, spec.right):
        value = rec[name]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            errors.add(row, name, "must be a string or an integer")
            return None
        ids.append(str(value))
    name = spec.value
    if spec.value_alias and spec.value_alias in rec:
        if spec.value in rec:
            errors.add(row, spec.value_alias, f"{spec.value!r} and {spec.value_alias!r} are the same value here; "
                                              "send one of them")
            return None
        name = spec.value_alias
    value = rec.get(name, spec.value_default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        errors.add(row, name, "must be a number")
        return None
    stamp = rec.get(spec.timestamp) if spec.timestamp else None
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)
                              or not INT64_MIN <= stamp <= INT64_MAX):
        errors.add(row, spec.timestamp, "must be a 64-bit integer or null")
        return None
    return ids[0], ids[1], float(value), stamp


def check_values(
    batch: Batch, spec: RowSpec, *, low: float | None, high: float | None, errors: ErrorLog,
    low_open: bool = False,
) -> None:
    """Range-check values (NaN and infinities fail; `low_open`: low itself fails) and ids (non-empty, bounded)."""
    v = batch.values
    ok = np.isfinite(v)
    if low is not None:
        ok &= v > low if low_open else v >= low
    if high is not None:
        ok &= v <= high
    if batch.bad is not None:
        ok |= batch.bad  # already reported as unparseable
    if not ok.all():
        bounds = f"{'(' if low_open else '['}{low}, {'inf' if high is None else high}]"
        for k in np.flatnonzero(~ok)[: errors.limit].tolist():
            errors.add(int(batch.rows[k]), spec.value, f"{v[k]} outside {bounds}")
    for name, col in ((spec.left, batch.left), (spec.right, batch.right)):
        bad_ids = {x: reason for x in set(col) if (reason := id_problem(x)) is not None}
        if bad_ids:
            for k, x in enumerate(col):
                if x in bad_ids:
                    errors.add(int(batch.rows[k]), name, bad_ids[x])
