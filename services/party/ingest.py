"""Atomic ingestion of interactions and social links: a whole request commits or nothing does."""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, BinaryIO, Literal

import numpy as np
from sqlalchemy import Table
from sqlalchemy.orm import Session

from services.db.party_tables import Item, User
from services.db.session import is_write_conflict
from services.errors import Conflict, ValidationFailed
from services.party.serving import mark_changed
from services.party.validation import (
    IMPLICIT_INTERACTIONS,
    INTERACTIONS,
    SOCIAL_LINKS,
    Batch,
    ErrorLog,
    RowSpec,
    check_values,
    csv_batches,
    ndjson_batches,
    records_batch,
)

CONCURRENT = ("the database is busy with a concurrent write (another upload or an erasure of a user this "
              "request refers to); nothing was stored, retry it")


class _Vanished(Exception):
    """An id this request resolved was deleted by a concurrent erasure."""


Kind = Literal["interactions", "social_links"]
Format = Literal["csv", "ndjson"]
Feedback = Literal["explicit", "implicit"]
ID_LOOKUP_CHUNK = 5_000


@dataclass(frozen=True)
class _Target:
    """A destination table, its upsert, and the staging layout used on PostgreSQL."""

    table: str
    columns: tuple[str, ...]
    conflict: tuple[str, ...]
    types: tuple[str, ...]  # PostgreSQL types of the staging table (binary COPY)

    def upsert(self, source: str) -> str:
        """INSERT ... {source} ON CONFLICT DO UPDATE (SQLite >= 3.24 and PostgreSQL)."""
        cols = ", ".join(self.columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in self.columns if c not in self.conflict)
        return (
            f"INSERT INTO {self.table} ({cols}) {source} "
            f"ON CONFLICT ({', '.join(self.conflict)}) DO UPDATE SET {updates}"
        )


INTERACTION_TARGET = _Target(
    "interactions",
    ("user_id", "item_id", "rating", "ts"),
    ("user_id", "item_id"),
    ("int8", "int8", "float8", "int8"),
)
LINK_TARGET = _Target(
    "social_links",
    ("src_user_id", "dst_user_id", "weight"),
    ("src_user_id", "dst_user_id"),
    ("int8", "int8", "float8"),
)


@dataclass(frozen=True)
class IngestReport:
    """What one committed request stored."""

    kind: str
    rows: int
    users: int  # distinct users in the request
    items: int  # distinct items in the request (0 for social links)
    seconds: float


class _IdMap:
    """Dense request-local ids for external ids; database ids are resolved lazily."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.local: dict[str, int] = {}
        self.order: list[str] = []
        self.db = np.empty(0, dtype=np.int64)

    def encode(self, col: Sequence[str]) -> np.ndarray:
        """Local ids of a column, registering ids not seen before in this request."""
        for ext in set(col).difference(self.local):
            self.local[ext] = len(self.order)
            self.order.append(ext)
        return np.fromiter(map(self.local.__getitem__, col), np.int64, count=len(col))

    def resolve(self, writer: _Writer) -> None:
        """Create missing rows in the database and learn the database id of every local id."""
        pending = self.order[len(self.db) :]
        if pending:
            self.db = np.concatenate([self.db, writer.ensure_ids(self.table, pending)])


class _PairGuard:
    """Detects a (left, right) pair occurring twice in one request, naming both rows."""

    def __init__(self) -> None:
        self.keys = np.empty(0, dtype=np.int64)  # sorted
        self.rows = np.empty(0, dtype=np.int64)

    def check(self, keys: np.ndarray, batch: Batch, spec: RowSpec, errors: ErrorLog) -> None:
        """Report duplicates within the batch and against earlier batches, then remember it."""
        order = np.argsort(keys, kind="stable")
        sk, sr = keys[order], batch.rows[order]
        for j in np.flatnonzero(sk[1:] == sk[:-1])[: errors.limit].tolist():
            self._report(batch, order[j + 1], int(sr[j]), spec, errors)
        pos = np.searchsorted(self.keys, sk)
        hit = pos < len(self.keys)
        hit[hit] = self.keys[pos[hit]] == sk[hit]
        for j in np.flatnonzero(hit)[: errors.limit].tolist():
            self._report(batch, order[j], int(self.rows[pos[j]]), spec, errors)
        # Stable sort of two sorted runs is a linear merge (timsort).
        merged = np.argsort(np.concatenate([self.keys, sk]), kind="stable")
        self.keys = np.concatenate([self.keys, sk])[merged]
        self.rows = np.concatenate([self.rows, sr])[merged]

    @staticmethod
    def _report(batch: Batch, k: int, other: int, spec: RowSpec, errors: ErrorLog) -> None:
        pair = f"({spec.left}={batch.left[k]!r}, {spec.right}={batch.right[k]!r})"
        errors.add(int(batch.rows[k]), None, f"duplicate pair {pair}: also on row {other}")


class _Writer:
    """Writes resolved rows through the raw DBAPI connection of the session's transaction."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.dialect = session.get_bind().dialect.name
        self.dbapi: Any = session.connection().connection.driver_connection
        self.staged: list[_Target] = []

    def ensure_ids(self, table: Table, externals: list[str]) -> np.ndarray:
        """Insert unknown external ids (ignoring existing ones) and return all their ids."""
        name, out = table.name, {}
        cursor = self.dbapi.cursor()
        try:
            for start in range(0, len(externals), ID_LOOKUP_CHUNK):
                chunk = externals[start : start + ID_LOOKUP_CHUNK]
                if self.dialect == "sqlite":
                    cursor.executemany(
                        f"INSERT INTO {name} (external_id) VALUES (?) ON CONFLICT DO NOTHING",
                        [(e,) for e in chunk],
                    )
                    marks = ", ".join("?" * len(chunk))
                    cursor.execute(
                        f"SELECT external_id, id FROM {name} WHERE external_id IN ({marks})", chunk
                    )
                else:
                    # One array parameter per statement: no per-row round trips.
                    cursor.execute(
                        f"INSERT INTO {name} (external_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                        (chunk,),
                    )
                    cursor.execute(
                        f"SELECT external_id, id FROM {name} WHERE external_id = ANY(%s)", (chunk,)
                    )
                out.update(cursor.fetchall())
        finally:
            cursor.close()
        missing = [e for e in externals if e not in out]
        if missing:  # inserted or found, then erased by a concurrent request before the lookup
            raise _Vanished(missing[0])
        return np.fromiter((out[e] for e in externals), np.int64, count=len(externals))

    def write(self, target: _Target, columns: Sequence[Iterable[Any]]) -> None:
        """Append rows: executemany on SQLite, binary COPY into a staging table on PostgreSQL."""
        cursor = self.dbapi.cursor()
        try:
            if self.dialect == "sqlite":
                values = f"VALUES ({', '.join('?' * len(target.columns))})"
                cursor.executemany(target.upsert(values), zip(*columns))
                return
            stage = f"_stage_{target.table}"
            if target not in self.staged:
                layout = ", ".join(f"{c} {t}" for c, t in zip(target.columns, target.types))
                cursor.execute(f"CREATE TEMP TABLE {stage} ({layout}) ON COMMIT DROP")
                self.staged.append(target)
            with cursor.copy(f"COPY {stage} FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(list(target.types))
                for row in zip(*columns):
                    copy.write_row(row)
        finally:
            cursor.close()

    def finish(self) -> None:
        """Move staged rows into their tables in key order (PostgreSQL; SQLite wrote directly)."""
        cursor = self.dbapi.cursor()
        try:
            for target in self.staged:
                keys = ", ".join(target.conflict)
                source = (
                    f"SELECT {', '.join(target.columns)} FROM _stage_{target.table} ORDER BY {keys}"
                )
                cursor.execute(target.upsert(source))
        finally:
            cursor.close()


class _Loader:
    """Validates batches, resolves ids and writes rows; writing stops at the first error."""

    def __init__(self, session: Session, spec: RowSpec, low: float | None, high: float | None):
        self.session, self.spec, self.low, self.high = session, spec, low, high
        self.errors = ErrorLog()
        self.writer: _Writer | None = None
        self.left = _IdMap(User.__table__)  # type: ignore[arg-type]
        right_table = Item.__table__ if spec.kind == "interactions" else User.__table__
        self.right = self.left if spec is SOCIAL_LINKS else _IdMap(right_table)  # type: ignore[arg-type]
        self.pairs = _PairGuard()
        self.rows = 0

    def add(self, batch: Batch) -> None:
        """Validate one batch and, while the request is still clean, write it."""
        if not len(batch):
            return
        # an implicit party's weights must be positive (0 would be "no interaction")
        check_values(batch, self.spec, low=self.low, high=self.high, errors=self.errors,
                     low_open=self.spec is IMPLICIT_INTERACTIONS)
        left, right = self.left.encode(batch.left), self.right.encode(batch.right)
        if self.spec is SOCIAL_LINKS:
            for k in np.flatnonzero(left == right)[: self.errors.limit].tolist():
                self.errors.add(int(batch.rows[k]), self.spec.right, "a user cannot link to itself")
        self.pairs.check((left << 32) | right, batch, self.spec, self.errors)
        self.rows += len(batch)
        if self.errors.total:
            return
        self.writer = self.writer or _Writer(self.session)
        self.left.resolve(self.writer)
        self.right.resolve(self.writer)
        left_db, right_db = self.left.db[left], self.right.db[right]
        # Writing in unique-key order turns random B-tree inserts into near-sequential ones.
        order = np.argsort((left_db << 32) | right_db, kind="stable")
        ids = [left_db[order].tolist(), right_db[order].tolist(), batch.values[order].tolist()]
        if self.spec.kind == "interactions":
            stamps: Iterable[int | None] = repeat(None, len(batch))
            if batch.timestamps is not None:
                stamps = [batch.timestamps[k] for k in order.tolist()]
            self.writer.write(INTERACTION_TARGET, [*ids, stamps])
        else:
            self.writer.write(LINK_TARGET, ids)

    def finish(self) -> None:
        """Complete the writes (the caller commits)."""
        if self.writer is not None:
            self.writer.finish()

    def report(self, started: float) -> IngestReport:
        """Summary of the request (called after a successful commit)."""
        items = 0 if self.spec is SOCIAL_LINKS else len(self.right.order)
        return IngestReport(
            self.spec.kind, self.rows, len(self.left.order), items, time.perf_counter() - started
        )


def _spec(kind: Kind, feedback: Feedback) -> RowSpec:
    if kind == "social_links":
        return SOCIAL_LINKS
    return IMPLICIT_INTERACTIONS if feedback == "implicit" else INTERACTIONS


def _bounds(spec: RowSpec, rating_min: float, rating_max: float) -> tuple[float | None, float | None]:
    """Ratings must lie on the party's scale; interaction weights must be positive, link weights non-negative."""
    return (rating_min, rating_max) if spec is INTERACTIONS else (0.0, None)


def _run(session: Session, loader: _Loader, batches: Iterator[Batch]) -> IngestReport:
    """Feed every batch, then commit only if no row was rejected; roll back on any failure."""
    started = time.perf_counter()
    try:
        for batch in batches:
            loader.add(batch)
        loader.errors.raise_if_any()
        if loader.rows == 0:
            raise ValidationFailed("no data rows", extra={"errors": []})
        loader.finish()
        mark_changed(session=session)  # serving rebuilds its snapshot (new users, new rated items)
        session.commit()
    except _Vanished as exc:
        session.rollback()
        raise Conflict(CONCURRENT, extra={"retryable": True}) from exc
    except Exception as exc:
        session.rollback()
        if not is_write_conflict(exc):
            raise
        # SQLite's one writer held the lock past the busy timeout, or (PostgreSQL) an erasure removed a
        # user this request had resolved: nothing was stored, and the same request may simply be sent again.
        raise Conflict(CONCURRENT, extra={"retryable": True}) from exc
    except BaseException:
        session.rollback()
        raise
    return loader.report(started)


def ingest_stream(
    *,
    session: Session,
    body: BinaryIO,
    kind: Kind,
    fmt: Format,
    rating_min: float,
    rating_max: float,
    batch_rows: int = 50_000,
    feedback: Feedback = "explicit",
) -> IngestReport:
    """Stream-parse a CSV/NDJSON body and store it atomically (422 naming rows if any is bad)."""
    spec = _spec(kind, feedback)
    loader = _Loader(session, spec, *_bounds(spec, rating_min, rating_max))
    text = io.TextIOWrapper(body, encoding="utf-8-sig", newline="")
    parse = csv_batches if fmt == "csv" else ndjson_batches
    batches = parse(text, spec, batch_rows=batch_rows, errors=loader.errors)
    try:
        return _run(session, loader, batches)
    except UnicodeDecodeError as exc:
        raise ValidationFailed(
            f"body is not valid UTF-8: {exc.reason}",
            extra={"errors": [{"row": None, "field": None, "reason": "not valid UTF-8"}]},
        ) from exc
    finally:
        text.detach()


def ingest_records(
    *,
    session: Session,
    records: Sequence[dict[str, Any]],
    kind: Kind,
    rating_min: float,
    rating_max: float,
    feedback: Feedback = "explicit",
) -> IngestReport:
    """Store a JSON batch of row objects atomically."""
    spec = _spec(kind, feedback)
    loader = _Loader(session, spec, *_bounds(spec, rating_min, rating_max))
    batch = records_batch(records, spec, errors=loader.errors)
    return _run(session, loader, iter([batch]))
