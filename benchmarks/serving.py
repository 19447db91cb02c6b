"""Serving throughput and latency of a real party process, driven by wrk on loopback.

Builds a party database with a synthetic catalogue (50,000 items, 20,000 users, ~25 ratings per
user) and a published serving model (90% of the users trained, the rest cold), starts
`python -m party_api` on it (default worker count unless --workers), and runs wrk at 50
connections against `GET /health` (the framework's floor), top-10 recommendations of random
users, and predictions of 100 random pairs; then top-10 again at 4 connections, where latency is
service time rather than queueing. In the same run, just before the party's `/health`, a bare
FastAPI app (benchmarks.bare_app: one route, uvicorn, one worker) answers `/health` under the same
load: `bare_health_rps`, the floor the party's guard, metrics and logs are measured against
(`health_vs_bare`, `recommend_vs_bare`). Each party is measured once its serving cache has precomputed
every user's top-K (its `fedrec_serving_precomputed_version` gauge), as a serving replica is before it
takes traffic. Last, a coordinator (`python -m coordinator_api`) fans the same top-10 requests out to two
parties (the first and a second process on a copy of its database) and merges them, measured the same way:
`coordinator_recommend_rps`, `coordinator_vs_bare`. wrk is installed by the project's setup (`make wrk`,
Debian package). The last stdout line is one JSON object with the issue's keys.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy.orm import Session

from cli.localfed import free_port, wait_healthy
from services.db.session import make_engine, migrate
from services.party.ingest import ingest_stream
from services.party.serving import ServingModel, publish

API_KEY = secrets.token_urlsafe(32)
ADMIN, COORDINATOR = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
METRICS = secrets.token_urlsafe(32)
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

# wrk scripts: random users / random pair batches, and a summary line wrk's Lua prints at the end.
DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, '
    .. '"errors": %d}\\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.connect + e.read + e.write + e.status + e.timeout))
end
"""
RECOMMEND = """
math.randomseed(%(seed)d)
request = function()
  local u = math.random(0, %(users)d - 1)
  return wrk.format("GET", "/v1/users/u" .. u .. "/recommendations?k=10", {["X-API-Key"] = "%(key)s"})
end
"""
PREDICT = """
math.randomseed(%(seed)d)
local bodies = {}
for b = 1, 200 do
  local parts = {}
  for p = 1, %(pairs)d do
    parts[p] = string.format('{"user_id":"u%%d","item_id":"i%%d"}', math.random(0, %(users)d - 1),
                             math.random(0, %(items)d - 1))
  end
  bodies[b] = '{"pairs":[' .. table.concat(parts, ",") .. ']}'
end
local headers = {["X-API-Key"] = "%(key)s", ["Content-Type"] = "application/json"}
request = function()
  return wrk.format("POST", "/v1/predictions", headers, bodies[math.random(1, #bodies)])
end
"""


def postgres_schema(base_url: str) -> tuple[str, str]:
    """Create a fresh schema; return (schema, URL whose search_path is it)."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{schema}"')
    return schema, f"{base_url}?options=-csearch_path%3D{schema}"


def drop_schema(base_url: str, schema: str) -> None:
    """Drop the benchmark's schema."""
    import psycopg

    with psycopg.connect(base_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as con:
        con.execute(f'DROP SCHEMA "{schema}" CASCADE')


def build_party(url: str, *, users: int, items: int, per_user: int, dim: int, seed: int) -> int:
    """Ratings through the ingest service, then a published model; returns the number of ratings."""
    rng = np.random.default_rng(seed)
    migrate(url)
    engine = make_engine(url)
    # Item popularity follows a Zipf-like law, as in real catalogues.
    weights = 1.0 / np.arange(1, items + 1) ** 0.8
    weights /= weights.sum()
    lines = ["user_id,item_id,rating"]
    for u in range(users):
        chosen = np.unique(rng.choice(items, size=per_user, p=weights))
        lines += [f"u{u},i{i},{r}" for i, r in zip(chosen.tolist(), rng.integers(1, 6, len(chosen)).tolist())]
    body = io.BytesIO(("\n".join(lines) + "\n").encode())
    with Session(engine) as session:
        report = ingest_stream(session=session, body=body, kind="interactions", fmt="csv",
                               rating_min=1.0, rating_max=5.0)
        trained = int(users * 0.9)  # the rest rated after training: popularity fallback
        model = ServingModel(
            run_id="bench", round_index=1, user_ids=np.array([f"u{u}" for u in range(trained)]),
            item_ids=np.array([f"i{i}" for i in range(items)]),
            h_u=rng.normal(0, 0.15, (trained, dim)).astype(np.float32),
            h_v=rng.normal(0, 0.15, (items, dim)).astype(np.float32),
            user_bias=rng.normal(0, 0.1, trained).astype(np.float32),
            item_bias=rng.normal(0, 0.1, items).astype(np.float32), global_bias=3.5,
            rating_min=1.0, rating_max=5.0)
        publish(session=session, model=model)
    engine.dispose()
    return report.rows


def wrk(url: str, path: str, script: str, *, connections: int, seconds: int, threads: int) -> dict[str, float]:
    """One wrk pass; its summary (requests, p50/p99 in µs, errors) parsed from the done() line."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script + DONE)
    try:
        out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
                              "-s", f.name, f"{url}{path}"], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    line = next(x for x in out.splitlines() if x.startswith("WRK "))
    stats: dict[str, float] = json.loads(line[4:])
    stats["rps"] = stats["requests"] / (stats["duration_us"] / 1e6)
    return stats


def start_party(url: str, workers: int | None, log: Path, party_id: str = "a") -> tuple[subprocess.Popen[bytes], str]:
    """`python -m party_api` on the database, waited on until ready and its top-K lists precomputed."""
    port = free_port()
    env = {**os.environ, "PARTY_DATABASE_URL": url, "PARTY_ADMIN_TOKEN": ADMIN, "PARTY_PARTY_ID": party_id,
           "PARTY_COORDINATOR_TOKEN": COORDINATOR, "PARTY_API_KEYS": json.dumps([API_KEY]),
           "PARTY_METRICS_TOKEN": METRICS, "PARTY_PORT": str(port)}
    if workers:
        env["PARTY_WORKERS"] = str(workers)
    proc = subprocess.Popen([sys.executable, "-m", "party_api"], env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, timeout=600, proc=proc, log=log, path="/ready")  # workers import slowly on a busy machine
    wait_precomputed(base)
    return proc, base


def wait_precomputed(base: str, *, timeout: float = 900.0) -> None:
    """Ask one top-K (the process builds its snapshot), then wait until its per-user lists are built."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=600) as http:
        http.get(f"{base}/v1/users/u0/recommendations", headers={"X-API-Key": API_KEY}).raise_for_status()
        while time.monotonic() < deadline:
            text = http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS}"}).text
            if any(line.startswith("fedrec_serving_precomputed_version ") and float(line.split()[1]) > 0
                   for line in text.splitlines()):
                return
            time.sleep(0.5)
    raise TimeoutError(f"{base} did not precompute its top-K lists within {timeout:.0f} s")


def start_coordinator(work: Path, parties: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m coordinator_api` on a fresh SQLite database with the parties registered."""
    port = free_port()
    home = work / "coordinator"
    env = {**os.environ, "COORD_DATABASE_URL": f"sqlite:///{home / 'coordinator.db'}", "COORD_DATA_DIR": str(home),
           "COORD_ADMIN_TOKEN": ADMIN, "COORD_API_KEYS": json.dumps([API_KEY]), "COORD_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "coordinator_api"], env=env,
                            stdout=(work / "coordinator.log").open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, timeout=300, proc=proc, log=work / "coordinator.log", path="/health")
    with httpx.Client(timeout=60) as http:
        for party_id, url in parties.items():
            http.post(f"{base}/v1/parties", headers={"Authorization": f"Bearer {ADMIN}"},
                      json={"party_id": party_id, "url": url, "token": COORDINATOR}).raise_for_status()
    return proc, base


def start_bare(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The bare FastAPI app (benchmarks.bare_app): uvicorn, one worker, `GET /health` only."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bare_app", "--port", str(port)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, timeout=120, proc=proc, log=log, path="/ready")
    return proc, base


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server process (killed if it does not exit within 30 s)."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure_coordinator(work: Path, base_a: str, url_b: str, args: argparse.Namespace, rec: str) -> dict[str, float]:
    """The coordinator's merged top-10 over two parties (the first party and a second process), under wrk."""
    proc_b, base_b = start_party(url_b, args.workers, work / "party_b.log", party_id="b")
    try:
        coord, coord_base = start_coordinator(work, {"a": base_a, "b": base_b})
        try:
            wrk(coord_base, "/", rec, connections=args.concurrency, seconds=3, threads=args.threads)
            return wrk(coord_base, "/", rec, connections=args.concurrency, seconds=args.seconds, threads=args.threads)
        finally:
            stop(coord)
    finally:
        stop(proc_b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--ratings-per-user", type=int, default=25)
    parser.add_argument("--dim", type=int, default=64, help="embedding size of the published model")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--light-concurrency", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=100, help="pairs per prediction request")
    parser.add_argument("--seconds", type=int, default=10, help="duration of each wrk pass")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, help="party worker processes (default: the service's default)")
    parser.add_argument("--postgres", action="store_true", help="party database on PostgreSQL")
    parser.add_argument("--postgres-url", default=os.environ.get("FEDREC_BENCH_POSTGRES_URL", POSTGRES_URL))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: run `make wrk` (apt-get install wrk)")

    with tempfile.TemporaryDirectory(prefix="fedrec-serving-") as tmp:
        work, schema = Path(tmp), None
        if args.postgres:
            schema, url = postgres_schema(args.postgres_url)
        else:
            url = f"sqlite:///{work / 'party.db'}"
        t0 = time.perf_counter()
        ratings = build_party(url, users=args.users, items=args.items, per_user=args.ratings_per_user,
                              dim=args.dim, seed=args.seed)
        print(f"built {args.users} users x {args.items} items, {ratings} ratings in "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
        url_b = None
        if not args.postgres:  # the coordinator's second party: a copy of the first's database
            for suffix in ("", "-wal", "-shm"):
                if (work / f"party.db{suffix}").exists():
                    shutil.copy(work / f"party.db{suffix}", work / f"party_b.db{suffix}")
            url_b = f"sqlite:///{work / 'party_b.db'}"
        proc, base = start_party(url, args.workers, work / "party.log")
        try:
            fill = {"seed": args.seed, "users": args.users, "items": args.items, "key": API_KEY, "pairs": args.pairs}
            rec, pred = RECOMMEND % fill, PREDICT % fill
            run = lambda path, script, c: wrk(base, path, script, connections=c,  # noqa: E731
                                              seconds=args.seconds, threads=args.threads)
            # Warm-up: every worker builds its snapshot and warms its code paths before measuring.
            wrk(base, "/", rec, connections=args.concurrency, seconds=3, threads=args.threads)
            # The floor, in the same minute: a bare FastAPI app served the same way (uvicorn, one worker),
            # while the party idles; both warmed up the same way.
            bare_proc, bare_base = start_bare(work / "bare.log")
            try:
                wrk(bare_base, "/health", "", connections=args.concurrency, seconds=3, threads=args.threads)
                bare = wrk(bare_base, "/health", "", connections=args.concurrency, seconds=args.seconds,
                           threads=args.threads)
            finally:
                stop(bare_proc)
            wrk(base, "/health", "", connections=args.concurrency, seconds=3, threads=args.threads)
            health = run("/health", "", args.concurrency)
            recommend = run("/", rec, args.concurrency)
            predict = run("/", pred, args.concurrency)
            light = run("/", rec, args.light_concurrency)
            coordinator = measure_coordinator(work, base, url_b or url, args, rec)
        finally:
            stop(proc)
            if schema:
                drop_schema(args.postgres_url, schema)
    passes = (health, recommend, predict, light)
    for name, p in zip(("bare_health", "health", "recommend", "predict", "recommend_light", "coordinator_recommend"),
                       (bare, *passes, coordinator)):
        print(f"{name}: {p['rps']:.0f} req/s, p50 {p['p50_us'] / 1e3:.2f} ms, p99 {p['p99_us'] / 1e3:.2f} ms, "
              f"errors {p['errors']:.0f}", file=sys.stderr)
    result = {
        "items": args.items, "concurrency": args.concurrency,
        "health_rps": round(health["rps"]), "health_p99_ms": round(health["p99_us"] / 1e3, 2),
        "recommend_rps": round(recommend["rps"]), "recommend_p50_ms": round(recommend["p50_us"] / 1e3, 2),
        "recommend_p99_ms": round(recommend["p99_us"] / 1e3, 2),
        "recommend_p99_ms_light": round(light["p99_us"] / 1e3, 2),
        "predict_rps": round(predict["rps"]), "predict_p99_ms": round(predict["p99_us"] / 1e3, 2),
        "errors": int(sum(p["errors"] for p in passes)), "load_generator": "wrk",
        "users": args.users, "ratings": ratings, "dim": args.dim, "workers": args.workers or "default",
        "backend": "postgresql" if args.postgres else "sqlite",
        "recommend_vs_health": round(recommend["rps"] / health["rps"], 3),
        "bare_health_rps": round(bare["rps"]), "health_vs_bare": round(health["rps"] / bare["rps"], 3),
        "recommend_vs_bare": round(recommend["rps"] / bare["rps"], 3), "bare_errors": int(bare["errors"]),
        "coordinator_recommend_rps": round(coordinator["rps"]),
        "coordinator_recommend_p99_ms": round(coordinator["p99_us"] / 1e3, 2),
        "coordinator_vs_bare": round(coordinator["rps"] / bare["rps"], 3),
        "coordinator_errors": int(coordinator["errors"]),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
