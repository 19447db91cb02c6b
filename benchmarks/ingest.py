"""Bulk ingestion throughput of a live party server versus raw sqlite3 executemany.

Loads N synthetic ratings through POST /v1/interactions/bulk of a real `python -m party_api`
process (SQLite, or PostgreSQL with --postgres), streaming each request body as a CSV
generator, and in the same run inserts the same rows with sqlite3 executemany into an
equivalent table (same columns, same unique constraint, same pragmas) as the baseline.
The last stdout line is one JSON object: rows, seconds, rows_per_s, baseline_rows_per_s, ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

from cli.localfed import free_port, wait_healthy

ADMIN = "bench-admin-token-0123456789abcdefghij"
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BODY_CHUNK_ROWS = 10_000


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n distinct (user, item) pairs with ratings 1..5 and timestamps, in random order."""
    rng = np.random.default_rng(seed)
    n_users, n_items = max(1_000, n // 100), max(500, n // 200)
    pairs = rng.choice(n_users * n_items, size=n, replace=False)
    ratings = rng.integers(1, 6, size=n)
    stamps = rng.integers(880_000_000, 900_000_000, size=n)
    return pairs // n_items, pairs % n_items, ratings, stamps


def csv_chunks(cols: tuple[np.ndarray, ...], start: int, stop: int) -> list[bytes]:
    """Rows [start, stop) rendered as CSV body chunks (header first)."""
    out = [b"user_id,item_id,rating,timestamp\n"]
    for lo in range(start, stop, BODY_CHUNK_ROWS):
        hi = min(lo + BODY_CHUNK_ROWS, stop)
        part = zip(*(c[lo:hi].tolist() for c in cols))
        out.append("".join(f"u{u},i{i},{r},{t}\n" for u, i, r, t in part).encode())
    return out


def stream(chunks: list[bytes]) -> Iterator[bytes]:
    """The request body as a generator (chunked transfer encoding)."""
    yield from chunks



def start_party(
    database_url: str, batch_rows: int, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """A real party process (migrations, then uvicorn), waited on until ready."""
    port = free_port()
    env = {
        **os.environ,
        "PARTY_DATABASE_URL": database_url,
        "PARTY_ADMIN_TOKEN": ADMIN,
        "PARTY_COORDINATOR_TOKEN": "bench-coordinator-token-0123456789abcdefghij",
        "PARTY_PORT": str(port),
        "PARTY_INGEST_BATCH_ROWS": str(batch_rows),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "party_api"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=60, proc=proc, log=log, path="/ready")
    except RuntimeError:
        proc.kill()
        raise
    return proc, url


def load_through_party(url: str, bodies: list[list[bytes]]) -> float:
    """Seconds to POST every request body (each request one atomic bulk upload)."""
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "text/csv"}
    with httpx.Client(base_url=url, headers=headers, timeout=3_600) as client:
        t0 = time.perf_counter()
        for chunks in bodies:
            client.post("/v1/interactions/bulk", content=stream(chunks)).raise_for_status()
        return time.perf_counter() - t0


def baseline(path: Path, cols: tuple[np.ndarray, ...]) -> float:
    """Seconds for raw sqlite3 executemany of the same rows into an equivalent table."""
    rows = list(zip(*(c.tolist() for c in cols)))
    con = sqlite3.connect(path)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL"):
        con.execute(f"PRAGMA {pragma}")
    con.execute(
        "CREATE TABLE interactions (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, "
        "item_id INTEGER NOT NULL, rating REAL NOT NULL, ts INTEGER, UNIQUE (user_id, item_id))"
    )
    t0 = time.perf_counter()
    con.executemany(
        "INSERT INTO interactions (user_id, item_id, rating, ts) VALUES (?, ?, ?, ?)", rows
    )
    con.commit()
    seconds = time.perf_counter() - t0
    assert con.execute("SELECT count(*) FROM interactions").fetchone()[0] == len(rows)
    con.close()
    return seconds


def postgres_schema(base_url: str) -> tuple[str, str]:
    """Create a fresh schema; return (schema, URL whose search_path is it)."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    dsn = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{schema}"')
    return schema, f"{base_url}?options=-csearch_path%3D{schema}"


def drop_schema(base_url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(
        base_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as con:
        con.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--request-rows", type=int, default=250_000, help="rows per bulk request")
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=50_000,
        help="server parse batch (PARTY_INGEST_BATCH_ROWS)",
    )
    parser.add_argument("--postgres", action="store_true", help="party database on PostgreSQL")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("FEDREC_BENCH_POSTGRES_URL", POSTGRES_URL)
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    cols = synthetic(args.rows, args.seed)
    bodies = [
        csv_chunks(cols, lo, min(lo + args.request_rows, args.rows))
        for lo in range(0, args.rows, args.request_rows)
    ]
    with tempfile.TemporaryDirectory(prefix="fedrec-bench-") as tmp:
        work, schema = Path(tmp), None
        if args.postgres:
            schema, url = postgres_schema(args.postgres_url)
        else:
            url = f"sqlite:///{work / 'party.db'}"
        proc, base = start_party(url, args.batch_rows, work / "party.log")
        try:
            seconds = load_through_party(base, bodies)
            counts = httpx.get(
                f"{base}/v1/counts", headers={"Authorization": f"Bearer {ADMIN}"}
            ).json()
            assert counts["interactions"] == args.rows, counts
        finally:
            proc.terminate()
            proc.wait(30)
            if schema:
                drop_schema(args.postgres_url, schema)
        base_seconds = baseline(work / "baseline.db", cols)
    result = {
        "rows": args.rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(args.rows / seconds),
        "baseline_rows_per_s": round(args.rows / base_seconds),
        "ratio": round(base_seconds / seconds, 3),
        "backend": "postgresql" if args.postgres else "sqlite",
        "requests": len(bodies),
        "baseline_seconds": round(base_seconds, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
