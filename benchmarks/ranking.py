"""Top-K ranking on the served path (issue 11): federated ranking model vs each party alone vs centralized baselines.

Per seed: the federated VerFedGNN with the ranking objective (preset tuned-ranking, privacy on),
each party alone on its own catalogue, and the centralized most-popular / EASE / BPR-MF /
LightGCN-BPR, all scored by services/evaluation/ranking.py (SPEC §5). "served" (first seed) is the
same federated model trained by live party processes and a live coordinator on loopback for the
best round's number of rounds, every test user's top-20 fetched through the coordinator's fan-out
over HTTP, and scored by the same code. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch

from cli.localfed import API_KEY, CoordinatorClient, coordinator_proc, load_party, party_proc
from services.data.types import Dataset
from services.evaluation import ranking, topk
from services.evaluation import ranking_experiment as rx
from services.evaluation.runner import PRESETS, preset_values
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig
from services.verfedgnn.reference import party_datas


def log(msg: str) -> None:
    """Progress on stderr (stdout's last line is the JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _ids(ds: Dataset, what: str) -> set[str]:
    return {str(x) for s in (ds.train, ds.valid, ds.test) if s is not None for x in getattr(s, what).tolist()}


def served(datasets: dict[str, Dataset], view: topk.RankingView, *, config: dict[str, Any], rounds: int,
           seed: int, preset: str, k: int = max(ranking.KS)) -> dict[str, Any]:
    """Train the same model over HTTP for `rounds` rounds, fetch every scored user's merged top-k, score it."""
    users = sorted(set.intersection(*[_ids(ds, "user_ids") for ds in datasets.values()]))
    column = {(p, it): view.offsets[p] + j for p in view.party_ids for j, it in enumerate(sorted(_ids(datasets[p],
                                                                                                 "item_ids")))}
    root = Path(tempfile.mkdtemp(prefix="fedrec-ranking-"))
    env = {"OMP_NUM_THREADS": "1"}
    procs = [party_proc(p, root, extra_env=env) for p in datasets]
    coord = coordinator_proc(root, extra_env={"COORD_PAUSE_POLL_S": "0.5", **env})
    lists: dict[int, list[int]] = {}
    try:
        for proc in [*procs, coord]:
            proc.start()
        http = httpx.Client(timeout=300)
        cc = CoordinatorClient(coord.url)
        for proc, (pid, ds) in zip(procs, datasets.items()):
            load_party(http, proc.url, ds)
            cc.register(pid, proc.url)
        run = cc.create_run(rounds=rounds, min_parties=len(datasets), seed=seed, preset=preset,
                            config={**config, "patience": rounds})
        status = cc.wait(run["run_id"], timeout=7200, poll_s=2.0)
        if status["state"] != "completed":
            raise SystemExit(f"HTTP run ended {status['state']}: {status['detail']}")
        for row in view.relevant:
            resp = http.get(f"{coord.url}/v1/users/{users[row]}/recommendations", params={"k": k},
                            headers={"X-API-Key": API_KEY})
            resp.raise_for_status()
            lists[row] = [column[(it["party_id"], it["item_id"])] for it in resp.json()["items"]]
        test_rmse = status["rounds"][-1]["metrics"]["test_rmse"]
    finally:
        for proc in [coord, *procs]:
            proc.stop()
    figures = ranking.evaluate_lists(lists, view.relevant, n_items=view.seen.shape[1], train_counts=view.train_counts)
    return {**rx.pick(figures), "rmse": test_rmse, "rounds": rounds, "seed": seed}


def run_seed(values: dict[str, Any], args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Federated, local-only and centralized figures of one seed (runs in a worker process with --jobs)."""
    torch.set_num_threads(1)
    parties = rx.seed_parties(args.dataset, args.data, split=args.split, n_parties=args.parties, seed=seed,
                              shares=args.shares)
    view = topk.ranking_view(parties)
    config = TrainConfig(**{**RUN_DEFAULTS, **values, "seed": seed})  # a coordinator run's defaults, as "served" gets
    started = time.perf_counter()
    row: dict[str, Any] = dict(rx.run_federated(parties, view, config=config)[0])
    log(f"seed {seed} federated: NDCG@10 {row['federated']['ndcg@10']:.4f} RMSE {row['federated']['rmse']:.4f} "
        f"best round {row['federated']['best_round']} shares shown {row['federated']['share_shown']} relevant "
        f"{row['federated']['share_relevant']} ({time.perf_counter() - started:.0f}s)")
    if args.federated_only:
        return row
    row["local_only"] = rx.run_local(parties, view, config=config)
    log(f"seed {seed} local: " + ", ".join(f"{r['ndcg@10']:.4f}" for r in row["local_only"]))
    row.update(rx.run_baselines(parties, view, seed=seed, log=lambda m: log(f"seed {seed} {m}")))
    return row


def main(argv: list[str] | None = None) -> None:
    """Run every seed and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--dataset", default="ml100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--preset", default="tuned-ranking", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a config value")
    ap.add_argument("--no-served", action="store_true", help="skip the live HTTP run")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run in this many processes at once")
    ap.add_argument("--federated-only", action="store_true",
                    help="only the federated model (e.g. with --set gradient_protection='\"dgrec\"'); implies --no-served")
    ap.add_argument("--shares", type=float, nargs="+", default=None,
                    help="item shares of the parties (a skewed split, e.g. 0.8 0.2; default: equal)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    values = {**preset_values(args.preset, args.model), **{kv.split("=", 1)[0]: json.loads(kv.split("=", 1)[1])
                                                            for kv in args.set}}
    log(f"config: {values}")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_seed, values, args, seed) for seed in range(args.seeds)]
        seeds = [futures[0].result()]
        live: dict[str, Any] | None = None
        if not args.no_served and not args.federated_only:
            datasets = rx.seed_datasets(args.dataset, args.data, split=args.split, n_parties=args.parties, seed=0)
            view = topk.ranking_view(party_datas(datasets))
            cfg = {k: v for k, v in values.items() if k not in ("rounds", "patience")}
            live = served(datasets, view, config=cfg, rounds=seeds[0]["federated"]["best_round"] + 1, seed=0,
                          preset=args.preset)
            live["federated_same_seed_ndcg@10"] = seeds[0]["federated"]["ndcg@10"]
            log(f"served: NDCG@10 {live['ndcg@10']:.4f} (federated, same seed: {seeds[0]['federated']['ndcg@10']:.4f})")
        seeds += [f.result() for f in futures[1:]]
    if args.federated_only:
        print(json.dumps({"federated": rx.mean_rows([s["federated"] for s in seeds]),
                          "federated_per_party": [rx.mean_rows([s["federated_per_party"][j] for s in seeds])
                                                  for j in range(args.parties)]}))
        return
    out: dict[str, Any] = {name: rx.mean_rows([s[name] for s in seeds])
                           for name in ("most_popular", "ease", "bprmf_centralized", "lightgcn_centralized", "federated")}
    out["served"] = live
    for name in ("local_only", "federated_per_party"):
        out[name] = [rx.mean_rows([s[name][j] for s in seeds]) for j in range(args.parties)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
