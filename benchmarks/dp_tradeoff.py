"""Accuracy against ε: VerFedGNN with secure aggregation and interaction-level DP, against each party alone.

For each ε (inf = no DP) the federation trains in-process exactly as coordinator runs do: seeds
agreed among the parties and party-local, every summed message masked, and (finite ε) each party's
training matrix randomized once (services/crypto/interaction_dp.py). The accountant's whole-run ε
is "epsilon_spent". Model selection: early stopping on the pooled validation RMSE that the parties
compute locally (a held-out tenth of u1.base); a DP run never sends those sums to the coordinator,
the benchmark pools them as the experimenter holding all the data. Test RMSE and NDCG@10 (full
catalogue of all parties, seen = train ∪ valid, relevant = test ratings ≥ 4;
services/evaluation/ranking.py) at the selected round. "local_only_rmse": each party trained alone
(privacy off, the harness's local protocol), in party order.

Prints progress on stderr and ONE JSON line:
{"runs": [{"epsilon", "delta", "rmse", "ndcg@10", "epsilon_spent", ...}], "local_only_rmse": [...], ...}
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.crypto.secagg import SecAggParty  # noqa: E402
from services.evaluation.harness import (  # noqa: E402
    Federation,
    build_federation,
    ensure_validation,
    run_protocol,
)
from services.evaluation.ranking import evaluate_scores, relevant_sets, seen_matrix  # noqa: E402
from services.evaluation.runner import PRESETS, load_dataset, preset_values  # noqa: E402
from services.federation.aggregation import MaskedSum, MaskedUpload  # noqa: E402
from services.verfedgnn.config import TrainConfig  # noqa: E402
from services.verfedgnn.coordinator import CoordinatorTrainer  # noqa: E402
from services.verfedgnn.private_data import training_data  # noqa: E402
from services.verfedgnn.rounds import InProcessFederation  # noqa: E402
from services.verfedgnn.secure import agree_in_process, dev_party_secret, seeded_trainer  # noqa: E402
from services.verfedgnn.types import rmse_mae  # noqa: E402


def ranking(fed: Federation, models: dict[str, dict[str, np.ndarray]]) -> float:
    """NDCG@10 over every party's catalogue from the parties' serving arrays (h_u · h_v + biases)."""
    blocks, seen_parts, rel_parts, offset = [], [], [], 0
    for p in fed.parties:
        m = models[p.party_id]
        score = m["user_repr"] @ m["item_repr"].T + m["item_bias"].reshape(1, -1)
        if "user_bias" in m:
            score = score + m["user_bias"].reshape(-1, 1) + float(np.asarray(m["global_bias"]).ravel()[0])
        blocks.append(score)
        seen_parts += [(p.train.users, p.train.items + offset), (p.valid.users, p.valid.items + offset)]
        rel_parts.append((p.test.users, p.test.items + offset, p.test.ratings))
        offset += p.n_items
    scores = np.concatenate(blocks, axis=1)
    seen = seen_matrix(fed.n_users, offset, *seen_parts)
    relevant = relevant_sets(np.concatenate([r[0] for r in rel_parts]), np.concatenate([r[1] for r in rel_parts]),
                             np.concatenate([r[2] for r in rel_parts]))
    counts = np.bincount(np.concatenate([items for _, items in seen_parts[::2]]), minlength=offset)
    return evaluate_scores(scores, seen=seen, relevant=relevant, train_counts=counts, ks=(10,))["ndcg@10"]


def dp_run(fed: Federation, config: TrainConfig) -> dict[str, Any]:
    """Train the masked federation with early stopping on the parties' pooled validation RMSE."""
    secret = {p.party_id: SecAggParty(party_id=p.party_id, secret=dev_party_secret(p.party_id), run_id="dp-tradeoff")
              for p in fed.parties}
    seeds = agree_in_process(secret, run_seed=config.seed)
    datas = {p.party_id: training_data(p, config=config, local_seed=seeds[p.party_id].local_seed) for p in fed.parties}
    n = sum(len(d.train) for d in datas.values())
    mean = sum(float(d.train.ratings.sum()) for d in datas.values()) / max(1, n)  # what the parties announce
    coord = CoordinatorTrainer(config=config, n_users=fed.n_users, global_mean=mean,
                               item_counts={p: d.n_items for p, d in datas.items()})
    trainers = {p: seeded_trainer(config=config, data=d, seeds=seeds[p]) for p, d in datas.items()}
    masks = {p: MaskedUpload(secagg=secret[p], parties=sorted(trainers)) for p in trainers}
    federation = InProcessFederation(coordinator=coord, parties=trainers, aggregations=masks, aggregation=MaskedSum())
    best: dict[str, Any] = {"valid_rmse": math.inf, "rmse": math.nan, "best_round": 0}
    models: dict[str, dict[str, np.ndarray]] = {}
    for t in range(config.rounds):
        federation.run_round(t)
        valid, _ = rmse_mae([tr.last_metrics["valid"] for tr in trainers.values()])
        if valid < best["valid_rmse"]:
            test, _ = rmse_mae([tr.last_metrics["test"] for tr in trainers.values()])
            # the serving arrays of the best round (fresh arrays each round); ranked once, at the end
            models = {p: {k: np.array(v, copy=True) for k, v in tr.serving_model().items()} for p, tr in trainers.items()}
            best = {"valid_rmse": valid, "rmse": test, "best_round": t}
        elif t - best["best_round"] >= config.patience:
            break
        if t % 50 == 49:
            print(f"  round {t + 1}: valid {valid:.4f} (best {best['valid_rmse']:.4f} at {best['best_round']})",
                  file=sys.stderr, flush=True)
    best["ndcg@10"] = ranking(fed, models) if models else math.nan
    best["rounds_run"] = t + 1
    best["train_ratings_after_randomization"] = n
    return best


def epsilon_row(fed: Federation, base: TrainConfig, eps: float) -> dict[str, Any]:
    """One ε (inf: no DP): the run's figures and the accountant's whole-run ε."""
    config = base.model_copy(update={"dp_epsilon": eps if math.isfinite(eps) else None})
    spent = config.guarantee().epsilon
    return {"epsilon": eps if math.isfinite(eps) else "inf", "delta": config.dp_delta, **dp_run(fed, config),
            "epsilon_spent": spent if math.isfinite(spent) else "inf"}


def local_only(fed: Federation, base: TrainConfig) -> list[float]:
    """Test RMSE of each party trained alone (privacy off, early stopping), in party order."""
    local = run_protocol(fed, protocol="local", config=base.model_copy(update={"secure_aggregation": False}))
    return [local.per_party[p.party_id]["rmse"] for p in fed.parties]


def main(argv: list[str] | None = None) -> None:
    """Run every ε and the local-only baseline, print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--epsilons", default="1,3,8,inf", help="comma-separated ε values; inf = no DP")
    ap.add_argument("--delta", type=float, default=1e-6, help="δ at which ε is reported")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--preset", default="tuned", choices=sorted(PRESETS))
    ap.add_argument("--rounds", type=int, default=200,
                    help="most rounds of every run (early stopping within them); 200 as benchmarks/federation.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="processes training the runs side by side")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.time()
    ds = ensure_validation(load_dataset("ml100k", args.data, split=args.split, seed=args.seed),
                           fraction=args.valid_fraction, seed=args.seed)
    fed = build_federation(ds, n_parties=args.parties, seed=args.seed)
    values = {**preset_values(args.preset, args.model), "rounds": args.rounds}
    base = TrainConfig(**{**values, "seed": args.seed, "dp_delta": args.delta, "secure_aggregation": True})

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    epsilons = [float(text) for text in args.epsilons.split(",")]
    # Independent runs: with --jobs > 1 each ε (and the local-only baseline) trains in its own process.
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=torch.set_num_threads, initargs=(args.threads,)) as pool:
        futures = [pool.submit(epsilon_row, fed, base, eps) for eps in epsilons]
        local_future = pool.submit(local_only, fed, base)
        pending: list[Future[Any]] = [*futures, local_future]
        for done in as_completed(pending):  # progress as each finishes
            log(json.dumps(done.result()))
        runs = [future.result() for future in futures]
        local_rmse = local_future.result()
    log(f"local only: {local_rmse}")
    print(json.dumps({"runs": runs, "local_only_rmse": local_rmse,
                      "setup": {"data": f"ml-100k {args.split} (validation: {args.valid_fraction} of train, "
                                        f"seed {args.seed})", "parties": args.parties, "model": args.model,
                                "preset": args.preset, "rounds_max": base.rounds, "patience": base.patience,
                                "secure_aggregation": True,
                                "unit": "one user-item interaction at one party (replace-one cell)"},
                      "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    main()
