"""What the validation NDCG@10 each party reports costs per round (ML-100K, the default run's settings).

Builds the federation a default coordinator run builds (tuned-ranking, secure aggregation; parties
party0.. over a random item split, validation carved from u1.base), plays `--rounds` rounds in one
process and times each party's `_valid_ndcg` (scoring its sampled validation users on its catalogue).
One JSON line: mean round seconds (every party in one process), the ranking's seconds per round
summed over parties and at the slowest party (what it adds to an HTTP round, where parties run in
parallel), its share of the round, users ranked per party and the pooled figure by round.

With `--train-seeds 0,1,2` it then trains each seed's run to early stopping as a coordinator run does
(validation RMSE decides, patience of the preset) and prints one JSON line per seed: the kept (best) round,
its validation RMSE and NDCG@10 (the figures a release carries and the gate compares), and the best
NDCG@10 of any round, so the gate's tolerances can be judged against run-to-run spread.

    OMP_NUM_THREADS=1 python benchmarks/valid_ranking_cost.py --data ../shared/data/ml-100k --split u1
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from services.evaluation import ranking_experiment as rx
from services.evaluation.harness import train_rounds
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.presets import DEFAULT_PRESET, preset_values
from services.verfedgnn.reference import build_federation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-seeds", default="", help="comma-separated seeds to train to early stopping")
    args = ap.parse_args()
    torch.set_num_threads(1)
    datas = rx.seed_parties("ml100k", args.data, split=args.split, n_parties=args.parties, seed=args.seed)
    config = TrainConfig(**{**preset_values(DEFAULT_PRESET, "gcn"), **RUN_DEFAULTS, "seed": args.seed})
    ref = build_federation(datas, config=config)
    spent: dict[str, float] = {p: 0.0 for p in ref.trainers}

    def timed(p: str, trainer: PartyTrainer) -> None:
        inner = trainer._valid_ndcg

        def wrapper(h_u: Any, h_v: Any) -> tuple[float, int]:
            started = time.perf_counter()
            try:
                return inner(h_u, h_v)
            finally:
                spent[p] += time.perf_counter() - started
        trainer._valid_ndcg = wrapper  # type: ignore[method-assign]

    for p, tr in ref.trainers.items():
        timed(p, tr)
    rounds, ndcg = [], []
    ref.federation.run_round(0)  # warm-up (first-touch allocations), not timed
    spent = dict.fromkeys(spent, 0.0)
    for t in range(1, args.rounds + 1):
        started = time.perf_counter()
        m = ref.federation.run_round(t)
        rounds.append(time.perf_counter() - started)
        ndcg.append(round(m.ndcg["valid"], 4))
    n = len(rounds)
    print(json.dumps({
        "rounds": n, "round_seconds": round(sum(rounds) / n, 4),
        "ranking_seconds_all_parties": round(sum(spent.values()) / n, 4),
        "ranking_seconds_slowest_party": round(max(spent.values()) / n, 4),
        "ranking_share_of_round": round(sum(spent.values()) / sum(rounds), 4),
        "ranked_users": {p: tr.last_metrics["valid"].ranked for p, tr in ref.trainers.items()},
        "items": {p: tr.data.n_items for p, tr in ref.trainers.items()},
        "valid_ndcg@10": ndcg}), flush=True)
    for seed in [int(x) for x in args.train_seeds.split(",") if x]:
        print(json.dumps(train(datas, seed)), flush=True)


def train(datas: Any, seed: int) -> dict[str, Any]:
    """One seed's run to early stopping on validation RMSE: the kept round's figures and the best NDCG@10."""
    config = TrainConfig(**{**preset_values(DEFAULT_PRESET, "gcn"), **RUN_DEFAULTS, "seed": seed})
    ref = build_federation(datas, config=config)
    ndcg: list[float] = []

    def run_round(t: int) -> Any:
        m = ref.federation.run_round(t)
        ndcg.append(m.ndcg["valid"])
        return m

    started = time.perf_counter()
    result = train_rounds(run_round, config=config, protocol="federated")
    best = result.best_round
    return {"seed": seed, "rounds_run": result.rounds_run, "best_round": best,
            "valid_rmse": round(min(result.valid_history), 4), "valid_ndcg@10": round(ndcg[best], 4),
            "max_valid_ndcg@10": round(max(ndcg), 4), "max_ndcg_round": ndcg.index(max(ndcg)),
            "seconds": round(time.perf_counter() - started, 1)}


if __name__ == "__main__":
    main()
