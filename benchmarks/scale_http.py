"""The Yelp-size federation as deployed: coordinator and parties as processes on loopback, real HTTP, real DB.

Defaults (--scale 1): 2 parties with 1.2M synthetic users each, 400k of them shared (2.0M distinct users),
7M ratings in all, 150k items split between the parties, D=20, K=2, sparse projection, secure aggregation
on (a coordinator run's default). --scale s multiplies users, items and ratings by s.

Steps, each timed: bulk ingest of every party's ratings through POST /v1/interactions/bulk (both parties
at once, CSV bodies rendered before the clock starts); a coordinator run of --rounds rounds whose PSI
(alignment) and rounds are read from the run's status; a serving burst of top-10 recommendations at
one party (a thread pool of httpx clients, --serving-requests requests at --serving-concurrency).
Then, in this process with the servers stopped, benchmarks/scale.py's in-process round on the same
data the parties train on (the aligned users, each party's own users as private users, and their
ratings; no secure aggregation, no HTTP).

Peak RSS is each service process's VmHWM (/proc), polled over the process tree (a party's forked
workers included) and the maximum per role reported. Progress goes to stderr; stdout gets ONE JSON
line with the issue's keys and a few more that say what limits them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale import TimedLink
from benchmarks.serving import drop_schema as pg_drop
from benchmarks.serving import postgres_schema as pg_schema
from cli.localfed import ADMIN, API_KEY, CoordinatorClient, Proc, coordinator_proc, party_proc
from services.data.synthetic import generate
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import VerFedGNNParty, run_round
from services.verfedgnn.types import PartyData, RatingTriples

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BODY_CHUNK_ROWS = 20_000
# The paper's preset with benchmarks/scale.py's settings on top (its Yelp run), sent as the run's config.
PRESET = "verfedgnn-paper"
TRAIN = {"model": "gcn", "layers": 2, "activation": "sigmoid", "projection_kind": "sparse",
         "q_ratio": 0.2, "r": 3.0, "thd": 4.0}


def say(msg: str) -> None:
    """Progress on stderr, stamped."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- data ----------------------------------------------------------------------------------------
class Party:
    """One party's ratings: global user and item indices (ids are u<k> and i<j>)."""

    def __init__(self, users: np.ndarray, items: np.ndarray, ratings: np.ndarray, catalogue: np.ndarray) -> None:
        self.users, self.items, self.ratings, self.catalogue = users, items, ratings, catalogue


def make_data(*, shared: int, exclusive: int, n_items: int, n_ratings: int, seed: int) -> list[Party]:
    """Two parties: users [0, shared) at both, then `exclusive` users of each party's own; items split at random.

    Ratings are spread over the distinct users in proportion; each party's part is drawn over its own
    catalogue, every user with at least one rating there (a user exists at a party through its ratings,
    so every shared user is in the intersection).
    """
    rng = np.random.default_rng(seed)
    distinct = shared + 2 * exclusive
    owner = rng.integers(0, 2, n_items)
    out = []
    for p in range(2):
        cat = np.flatnonzero(owner == p)
        users, items, ratings = [], [], []
        for k, (n, first) in enumerate([(shared, 0), (exclusive, shared + p * exclusive)]):
            d = generate(n, cat.size, n_ratings * n // distinct // (2 if k == 0 else 1), seed=seed + 1 + 2 * p + k,
                         ratios=(1.0, 0.0, 0.0))
            users.append(d.train.user_ids.astype(np.int64) - 1 + first)
            items.append(cat[d.train.item_ids.astype(np.int64) - 1])
            ratings.append(d.train.ratings.astype(np.float32))
        out.append(Party(np.concatenate(users), np.concatenate(items), np.concatenate(ratings), cat))
    return out


def csv_bodies(party: Party, request_rows: int) -> list[list[bytes]]:
    """The party's rows as CSV bulk bodies of `request_rows` rows (each a list of chunks, header first)."""
    order = np.random.default_rng(7).permutation(party.users.size)
    u, i, r = party.users[order].tolist(), party.items[order].tolist(), party.ratings[order].astype(int).tolist()
    bodies = []
    for lo in range(0, len(u), request_rows):
        chunks = [b"user_id,item_id,rating\n"]
        for c in range(lo, min(lo + request_rows, len(u)), BODY_CHUNK_ROWS):
            hi = min(c + BODY_CHUNK_ROWS, lo + request_rows, len(u))
            chunks.append("".join(f"u{a},i{b},{x}\n" for a, b, x in zip(u[c:hi], i[c:hi], r[c:hi])).encode())
        bodies.append(chunks)
    return bodies


def stream(chunks: list[bytes]) -> Iterator[bytes]:
    """A request body as a generator (chunked transfer encoding, as a streaming uploader sends it)."""
    yield from chunks


# ---- processes -----------------------------------------------------------------------------------
def tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return out


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set of one process (VmHWM), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakWatcher:
    """Polls the VmHWM of every process under each service (forked workers come and go) in a thread."""

    def __init__(self, procs: dict[str, Proc], every_s: float = 0.5) -> None:
        self.procs, self.every_s = procs, every_s
        self.peak: dict[str, dict[int, int]] = {name: {} for name in procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        """Read the peaks now."""
        for name, proc in self.procs.items():
            if proc.popen is None:
                continue
            for pid in tree(proc.popen.pid):
                kib = vm_hwm_kib(pid)
                self.peak[name][pid] = max(self.peak[name].get(pid, 0), kib)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """A last poll, then stop."""
        self.poll()
        self._stop.set()
        self._thread.join(5)

    def gb(self, name: str) -> float:
        """The largest peak of any single process of the service, GB (GiB)."""
        return max(self.peak[name].values(), default=0) / 1024 / 1024


# ---- the steps -----------------------------------------------------------------------------------
def ingest(urls: list[str], bodies: list[list[list[bytes]]]) -> tuple[float, list[float]]:
    """POST every party's bulk bodies, the parties at once; (wall seconds, per-party seconds)."""
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "text/csv"}

    def one(url: str, mine: list[list[bytes]]) -> float:
        with httpx.Client(base_url=url, headers=headers, timeout=3_600) as client:
            t0 = time.perf_counter()
            for k, chunks in enumerate(mine):
                client.post("/v1/interactions/bulk", content=stream(chunks)).raise_for_status()
                say(f"  {url}: bulk request {k + 1}/{len(mine)} at {time.perf_counter() - t0:.1f}s")
            return time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(urls)) as pool:
        each = list(pool.map(one, urls, bodies))
    return time.perf_counter() - t0, each


def serving_burst(url: str, users: np.ndarray, *, requests: int, concurrency: int, seed: int) -> dict[str, Any]:
    """Top-10 recommendations of random trained users from `concurrency` threads; latency percentiles."""
    picks = np.random.default_rng(seed).choice(users, size=requests).tolist()
    headers = {"X-API-Key": API_KEY}
    lat: list[float] = []
    errors: dict[int, int] = {}
    lock = threading.Lock()
    local = threading.local()

    def one(u: int) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=url, headers=headers, timeout=30)
        t0 = time.perf_counter()
        resp = client.get(f"/v1/users/u{u}/recommendations", params={"k": 10})
        dt = time.perf_counter() - t0
        with lock:
            lat.append(dt)
            if resp.status_code != 200:
                errors[resp.status_code] = errors.get(resp.status_code, 0) + 1

    for u in picks[: concurrency * 2]:  # warm-up: the first requests build the serving snapshot
        one(u)
    lat.clear()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, picks))
    wall = time.perf_counter() - t0
    ms = np.array(lat) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "rps": len(lat) / wall, "errors": sum(errors.values()),
            "error_statuses": errors}


def inprocess_round(parties: list[Party], *, shared: int, engine: dict[str, Any], threads: int,
                    rounds: int) -> dict[str, Any]:
    """benchmarks/scale.py's round on the data the HTTP parties train on: the aligned users, and each party's
    own users as its private users, with their ratings."""
    torch.set_num_threads(threads)
    order = np.argsort(np.array([f"u{k}" for k in range(shared)]))  # aligned order: sorted by id, as the parties do
    index = np.empty(shared, dtype=np.int64)
    index[order] = np.arange(shared)
    datas, means = [], []
    for p, party in enumerate(parties):
        keep = party.users < shared
        local = np.full(int(party.catalogue.max()) + 1, -1, dtype=np.int64)
        local[party.catalogue] = np.arange(party.catalogue.size)
        # the party's own users (outside the intersection) train too, as private users after the aligned ones
        own = np.unique(party.users[~keep])
        own_ids = np.array([f"u{k}" for k in own])
        by_id = np.argsort(own_ids)
        row = np.full(int(party.users.max()) + 1, -1, dtype=np.int64)
        row[:shared] = index
        row[own[by_id]] = shared + np.arange(own.size)
        train = RatingTriples(row[party.users], local[party.items], party.ratings)
        datas.append(PartyData(f"party{p}", shared, int(party.catalogue.size),
                               sum(int(q.catalogue.size) for q in parties), train,
                               private_user_ids=own_ids[by_id].tolist()))
        means.append(party.ratings[keep])
    # the HTTP run's settings, without secure aggregation: scale.py's round (in-process links carry no masks)
    cfg = TrainConfig(**{**engine, "secure_aggregation": False, "rounds": 1})
    coord = CoordinatorTrainer(config=cfg, n_users=shared, item_counts={d.party_id: d.n_items for d in datas},
                               global_mean=float(np.concatenate(means).mean()))
    party_s: dict[str, float] = {}
    counts = coord.item_counts
    links = {d.party_id: TimedLink(d.party_id, VerFedGNNParty(trainer=PartyTrainer(config=cfg, data=d, seed=0),
                                                              item_counts=counts), party_s) for d in datas}
    times, upload = [], 0
    for t in range(rounds):  # round 0 pays lazy initialisation; the last one is reported, as in scale.py
        party_s.clear()
        t0 = time.perf_counter()
        outcome = run_round(coord=coord, links=links, round_index=t)
        assert outcome.metrics is not None, outcome.failures
        times.append(time.perf_counter() - t0)
        upload = int(outcome.metrics.upload_bytes)
        say(f"  in-process round {t}: {times[-1]:.2f}s")
    return {"round_seconds": times[-1], "party_seconds": dict(party_s),
            "upload_bytes": upload}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies users, items and ratings")
    ap.add_argument("--shared-users", type=int, default=400_000)
    ap.add_argument("--party-users", type=int, default=1_200_000, help="users at each party (shared included)")
    ap.add_argument("--ratings", type=int, default=7_000_000)
    ap.add_argument("--items", type=int, default=150_000)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-workers", type=int, default=1, help="PARTY_TRAIN_WORKERS of each party")
    ap.add_argument("--party-threads", type=int, default=1, help="torch threads per party process")
    ap.add_argument("--inprocess-threads", type=int, default=1,
                    help="torch threads of the in-process round (as each party process: on 2 busy cores more threads slow sparse ops down)")
    ap.add_argument("--request-rows", type=int, default=250_000, help="rows per bulk request")
    ap.add_argument("--serving-requests", type=int, default=2_000)
    ap.add_argument("--serving-concurrency", type=int, default=8)
    ap.add_argument("--postgres", action="store_true", help="coordinator and parties on PostgreSQL")
    ap.add_argument("--postgres-url", default=os.environ.get("FEDREC_BENCH_POSTGRES_URL", POSTGRES_URL))
    ap.add_argument("--timeout", type=float, default=7_200, help="deadline of the run, seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    s = args.scale
    shared = round(args.shared_users * s)
    exclusive = round((args.party_users - args.shared_users) * s)
    n_items, n_ratings = round(args.items * s), round(args.ratings * s)

    t0 = time.perf_counter()
    parties = make_data(shared=shared, exclusive=exclusive, n_items=n_items, n_ratings=n_ratings, seed=args.seed)
    rows = [int(p.users.size) for p in parties]
    bodies = [csv_bodies(p, args.request_rows) for p in parties]
    say(f"data: {shared + 2 * exclusive} users ({shared} shared), {n_items} items, {sum(rows)} ratings "
        f"{rows}, bodies {sum(len(c) for b in bodies for r in b for c in r) / 1e6:.0f} MB, "
        f"{time.perf_counter() - t0:.1f}s")

    root = Path(tempfile.mkdtemp(prefix="fedrec-scale-http-"))
    schemas: list[str] = []
    names = [f"party{p}" for p in range(2)]
    threads = {"OMP_NUM_THREADS": str(args.party_threads)}
    party_env: dict[str, dict[str, str]] = {n: {**threads, "PARTY_TRAIN_WORKERS": str(args.train_workers)}
                                            for n in names}
    # A PSI step over 1.2M users takes minutes (EC operations): the coordinator waits for it that long.
    coord_env = {"COORD_PAUSE_POLL_S": "0.5", "COORD_REQUEST_TIMEOUT_S": "3600", **threads}
    if args.postgres:
        for n in names:
            schema, url = pg_schema(args.postgres_url)
            schemas.append(schema)
            party_env[n]["PARTY_DATABASE_URL"] = url
        schema, url = pg_schema(args.postgres_url)
        schemas.append(schema)
        coord_env["COORD_DATABASE_URL"] = url
    procs = {n: party_proc(n, root, extra_env=party_env[n]) for n in names}
    coord = coordinator_proc(root, extra_env=coord_env)
    watcher = PeakWatcher({**procs, "coordinator": coord})
    result: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    try:
        for proc in [*procs.values(), coord]:
            proc.start(timeout=120)
        watcher.start()
        say("ingest: bulk CSV through the parties' API")
        ingest_s, per_party = ingest([procs[n].url for n in names], bodies)
        del bodies
        say(f"ingest: {sum(rows)} rows in {ingest_s:.1f}s ({sum(rows) / ingest_s:.0f} rows/s)")
        cc = CoordinatorClient(coord.url, http=httpx.Client(timeout=120))
        for n in names:
            cc.register(n, procs[n].url)
        config = {**TRAIN, "dim": args.dim, "patience": args.rounds}
        started = time.perf_counter()
        run = cc.create_run(rounds=args.rounds, min_parties=2, seed=args.seed, preset=PRESET, config=config)
        engine = {k: v for k, v in run["config"].items() if k != "protocol"}  # every setting the run resolved
        seen: dict[str, float] = {}  # first time each "state: detail" was polled

        def on_poll(status: dict[str, Any]) -> None:
            key = f"{status['state']}: {status.get('detail') or ''} ({status['rounds_done']} rounds)"
            if key not in seen:
                seen[key] = time.perf_counter() - started
                say(f"  run {key} at {seen[key]:.1f}s")

        # status answers carry every round so far; with 3 rounds a 0.25 s poll costs the coordinator little
        status = cc.wait(run["run_id"], timeout=args.timeout, poll_s=0.25, on_poll=on_poll)
        total_s = time.perf_counter() - started
        if status["state"] != "completed":
            raise SystemExit(f"run ended {status['state']}: {status['detail']}")
        rounds = status["rounds"]
        round_s = [r["seconds"] for r in rounds]
        say(f"run: {total_s:.1f}s, rounds {[round(x, 2) for x in round_s]}")
        traffic = {n: [r["bytes_sent"].get(n, 0) + r["bytes_received"].get(n, 0) for r in rounds] for n in names}
        say("serving burst")
        trained = np.arange(shared)
        burst = serving_burst(procs[names[0]].url, trained, requests=args.serving_requests,
                              concurrency=args.serving_concurrency, seed=args.seed)
        say(f"serving: {burst}")
        watcher.stop()
        result = {
            "users": shared + 2 * exclusive, "ratings": sum(rows),
            "ingest_rows_per_s": round(sum(rows) / ingest_s),
            "psi_seconds": None,  # filled below from the run's phase times
            "round_seconds": round(round_s[-1], 2),
            "bytes_per_round_per_party": round(float(np.mean([v[-1] for v in traffic.values()]))),
            "peak_rss_gb": {"coordinator": round(watcher.gb("coordinator"), 2),
                            "party": round(max(watcher.gb(n) for n in names), 2)},
            "serving_p99_ms": round(burst["p99_ms"], 2),
            "train_workers": args.train_workers,
            "shared_users": shared, "party_users": shared + exclusive, "items": n_items, "dim": args.dim,
            "scale": s, "backend": "postgresql" if args.postgres else "sqlite",
            "ingest_seconds": round(ingest_s, 1), "ingest_seconds_by_party": [round(x, 1) for x in per_party],
            "round_seconds_all": [round(x, 2) for x in round_s],
            "run_seconds_total": round(total_s, 1), "run_phases_s": {k: round(v, 1) for k, v in seen.items()},
            "serving_p50_ms": round(burst["p50_ms"], 2), "serving_rps": round(burst["rps"]),
            "serving_errors": burst["errors"], "serving_concurrency": args.serving_concurrency,
        }
        result["psi_seconds"] = _psi_seconds(seen)
    finally:
        watcher.stop()
        for proc in [coord, *procs.values()]:
            proc.stop()
        for schema in schemas:
            pg_drop(args.postgres_url, schema)
        shutil.rmtree(root, ignore_errors=True)
    say("in-process round (benchmarks/scale.py's) on the same data")
    ip = inprocess_round(parties, shared=shared, engine=engine, threads=args.inprocess_threads, rounds=2)
    result["inprocess_round_seconds"] = round(ip["round_seconds"], 2)
    result["ratio_round_http_over_inprocess"] = round(result["round_seconds"] / ip["round_seconds"], 3)
    print(json.dumps(result))


def _psi_seconds(seen: dict[str, float]) -> float | None:
    """Seconds from the run's "aligning users" status to its "N common users" one (to the poll interval)."""
    begin = [t for k, t in seen.items() if "aligning users by private set intersection" in k]
    end = [t for k, t in seen.items() if "common users" in k]
    return round(min(end) - min(begin), 1) if begin and end else None


if __name__ == "__main__":
    main()
