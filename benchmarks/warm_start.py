"""Warm start (issue 24): a retraining run that starts from the active release vs one that starts cold.

ML-100K (u1 by default) split between 2 party processes as benchmarks/ranking.py splits it (items at
random, 10 % of u1.base labelled validation, seeded; u1.test labelled test). A first run with the
default settings (preset tuned-ranking, early stopping, secure aggregation) trains on u1.base less a
seeded 10 % of its ratings (taken from the training part, so every run validates on the same labelled
ratings and none of them was ever trained on); its release becomes active. The withheld ratings are
then ingested, and the same default run is trained twice more over live HTTP: warm (`warm_start`) and
cold. Each run's release is activated in turn and every test user's merged top-20 fetched through the
coordinator's fan-out, scored by services/evaluation/ranking.py.

Prints one JSON line: rounds, wall seconds (creation to completion, PSI and set-up included), best
pooled validation RMSE and test NDCG@10 of the cold and the warm run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cli.localfed import ADMIN, API_KEY, CoordinatorClient, coordinator_proc, load_party, party_proc
from services.data.types import Dataset, Ratings
from services.evaluation import ranking, topk
from services.evaluation import ranking_experiment as rx
from services.verfedgnn.reference import party_datas

WITHHELD_TAG = 0x5741524D  # separates the withheld draw from the run's other seeded streams
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


def log(msg: str) -> None:
    """Progress on stderr (stdout's only line is the JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _subset(r: Ratings, keep: np.ndarray) -> Ratings:
    return Ratings(r.user_ids[keep], r.item_ids[keep], r.ratings[keep], r.timestamps[keep])


def withhold(ds: Dataset, *, fraction: float, seed: int, party: int) -> tuple[Dataset, Ratings]:
    """The party's data set less `fraction` of its u1.base ratings (train + validation), taken from train only."""
    base = len(ds.train) + (len(ds.valid) if ds.valid is not None else 0)
    rng = np.random.default_rng([seed, WITHHELD_TAG, party])
    out = np.zeros(len(ds.train), dtype=bool)
    out[rng.choice(len(ds.train), size=round(fraction * base), replace=False)] = True
    return replace(ds, train=_subset(ds.train, ~out)), _subset(ds.train, out)


def _ingest(http: httpx.Client, url: str, rows: Ratings) -> None:
    body = [{"user_id": str(u), "item_id": str(i), "rating": float(x)}
            for u, i, x in zip(rows.user_ids.tolist(), rows.item_ids.tolist(), rows.ratings.tolist())]
    for start in range(0, len(body), 5000):
        resp = http.post(f"{url}/v1/interactions", json={"rows": body[start:start + 5000]}, headers=ADMIN_H)
        resp.raise_for_status()


def _train(cc: CoordinatorClient, *, seed: int, warm: bool) -> tuple[dict[str, Any], float]:
    """One default run (only the seed and warm_start set) to the end; its status and wall seconds."""
    started = time.perf_counter()
    run = cc.create_run(min_parties=2, seed=seed, **({"warm_start": True} if warm else {}))
    status = cc.wait(run["run_id"], timeout=4 * 3600, poll_s=1.0)
    seconds = time.perf_counter() - started
    if status["state"] != "completed":
        raise SystemExit(f"run ended {status['state']}: {status['detail']}")
    valid = [r["metrics"]["valid_rmse"] for r in status["rounds"]]
    log(f"{'warm' if warm else 'cold'} run {run['run_id']}: {status['rounds_done']} rounds, {seconds:.0f}s, best valid "
        f"RMSE {min(valid):.4f} at round {int(np.argmin(valid))}, first {valid[0]:.4f}; {status['detail']}")
    return status, seconds


def _release_of(http: httpx.Client, url: str, run_id: str) -> dict[str, Any]:
    rows = http.get(f"{url}/v1/releases", headers=ADMIN_H).json()
    return dict(next(r for r in rows if r["run_id"] == run_id))


def _ndcg(http: httpx.Client, url: str, run_id: str, view: topk.RankingView, users: list[str],
          column: dict[tuple[str, str], int]) -> float:
    """Activate the run's release (forced past the gate if it held it) and score the served top-20 lists."""
    release = _release_of(http, url, run_id)
    if release["state"] != "active":
        resp = http.post(f"{url}/v1/releases/{release['release_id']}/activate", headers=ADMIN_H, json={"force": True})
        resp.raise_for_status()
    time.sleep(2.0)  # the parties' serving refresh
    lists: dict[int, list[int]] = {}
    for row in view.relevant:
        resp = http.get(f"{url}/v1/users/{users[row]}/recommendations", params={"k": 20}, headers={"X-API-Key": API_KEY})
        resp.raise_for_status()
        assert resp.json()["release_id"] == release["release_id"], resp.json()
        lists[row] = [column[(it["party_id"], it["item_id"])] for it in resp.json()["items"]]
    figures = ranking.evaluate_lists(lists, view.relevant, n_items=view.seen.shape[1], train_counts=view.train_counts)
    return float(figures["ndcg@10"])


def main(argv: list[str] | None = None) -> None:
    """Run 1 on u1.base less 10 %, then cold and warm runs on all of it; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--withhold", type=float, default=0.1, help="share of u1.base kept out of the first run")
    args = ap.parse_args(argv)
    full = rx.seed_datasets("ml100k", args.data, split=args.split, n_parties=2, seed=args.seed)
    first = {p: withhold(ds, fraction=args.withhold, seed=args.seed, party=k) for k, (p, ds) in enumerate(full.items())}
    view = topk.ranking_view(party_datas(full))
    ids = {p: {str(x) for s in (ds.train, ds.valid, ds.test) if s is not None for x in s.user_ids.tolist()}
           for p, ds in full.items()}
    users = sorted(set.intersection(*ids.values()))
    column = {(p, it): view.offsets[p] + j for p in view.party_ids
              for j, it in enumerate(sorted({str(x) for s in (full[p].train, full[p].valid, full[p].test)
                                              if s is not None for x in s.item_ids.tolist()}))}
    root = Path(tempfile.mkdtemp(prefix="fedrec-warm-"))
    env = {"OMP_NUM_THREADS": "1", "PARTY_SERVING_REFRESH_S": "0.5"}
    procs = {p: party_proc(p, root, extra_env=env) for p in full}
    coord = coordinator_proc(root, extra_env={"COORD_PAUSE_POLL_S": "0.5", "OMP_NUM_THREADS": "1"})
    try:
        for proc in [*procs.values(), coord]:
            proc.start()
        http = httpx.Client(timeout=300)
        cc = CoordinatorClient(coord.url)
        for p, (ds, _) in first.items():
            load_party(http, procs[p].url, ds)
            cc.register(p, procs[p].url)
        log(f"first run on u1.base less {sum(len(w) for _, w in first.values())} ratings")
        base, _ = _train(cc, seed=args.seed, warm=False)
        release = _release_of(http, coord.url, base["run_id"])
        assert release["state"] == "active", release
        for p, (_, held) in first.items():
            _ingest(http, procs[p].url, held)
        warm, warm_s = _train(cc, seed=args.seed, warm=True)
        assert warm["warm_start_from"] == release["release_id"], warm["warm_start_from"]
        log(f"users: first run {base['n_users']}, second {warm['n_users']}")
        warm_ndcg = _ndcg(http, coord.url, warm["run_id"], view, users, column)
        cold, cold_s = _train(cc, seed=args.seed, warm=False)
        cold_ndcg = _ndcg(http, coord.url, cold["run_id"], view, users, column)
    finally:
        for proc in [coord, *procs.values()]:
            proc.stop()

    def best(status: dict[str, Any]) -> float:
        return round(min(r["metrics"]["valid_rmse"] for r in status["rounds"]), 6)
    print(json.dumps({"cold_rounds": cold["rounds_done"], "warm_rounds": warm["rounds_done"],
                      "cold_seconds": round(cold_s, 1), "warm_seconds": round(warm_s, 1),
                      "cold_best_valid_rmse": best(cold), "warm_best_valid_rmse": best(warm),
                      "cold_test_ndcg@10": round(cold_ndcg, 6), "warm_test_ndcg@10": round(warm_ndcg, 6)}))


if __name__ == "__main__":
    main()
