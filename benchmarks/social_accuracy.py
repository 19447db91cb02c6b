"""FilmTrust social-gnn benchmark: P4GCN with DP, without DP, LightGCN alone; prints one JSON line.

Usage: python benchmarks/social_accuracy.py --data ../shared/data/filmtrust --seeds 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.data.filmtrust import load_filmtrust
from services.evaluation.social import FILMTRUST_MODEL, filmtrust_train_config, run_variant
from services.evaluation.social_comm import communication_report
from services.p4gcn.trainer import index_dataset


def main() -> None:
    """Run every variant over the seeds and print the JSON summary."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/filmtrust")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30, help="max epochs (the DP noise is calibrated for them)")
    ap.add_argument("--epsilon", type=float, default=15.0)
    ap.add_argument("--delta", type=float, default=1e-4)
    ap.add_argument("--variants", default="dp,dp-forward,nodp,lightgcn,fusion-only")
    ap.add_argument("--ema-decay", type=float, default=0.97, help="weight EMA of the rating party (0: off)")
    ap.add_argument("--key-bits", type=int, default=2048, help="0 skips the communication measurement")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, object] = {"dataset": "filmtrust", "split": "random 80/10/10 (seeded)", "seeds": args.seeds,
                              "epsilon": args.epsilon, "delta": args.delta, "user_batch": 64,
                              "ema_decay": args.ema_decay}
    model_cfg = FILMTRUST_MODEL
    per: dict[str, list[tuple[float, float]]] = {v: [] for v in args.variants.split(",")}
    privacy: dict[str, object] = {}
    t0 = time.time()
    for seed in range(args.seeds):
        data = index_dataset(load_filmtrust(args.data, seed=seed, ratios=(0.8, 0.1, 0.1)))
        cfg = filmtrust_train_config(seed=seed, epochs=args.epochs, ema_decay=args.ema_decay)
        for variant, scores in per.items():
            res = run_variant(data, variant=variant, model_config=model_cfg, config=cfg, epsilon=args.epsilon,
                              delta=args.delta)
            scores.append((res.rmse, res.mae))
            if variant == "dp":
                privacy = res.privacy
            print(f"seed {seed} {variant}: rmse {res.rmse:.4f} mae {res.mae:.4f} best epoch {res.best_epoch}",
                  file=sys.stderr, flush=True)
    for variant, vals in per.items():
        arr = np.array(vals)
        out[f"rmse_{variant}"] = round(float(arr[:, 0].mean()), 4)
        out[f"rmse_{variant}_std"] = round(float(arr[:, 0].std()), 4)
        out[f"mae_{variant}"] = round(float(arr[:, 1].mean()), 4)
    out["privacy_dp_last_seed"] = {k: privacy[k] for k in ("epsilon_spent", "noise_multiplier", "sigma", "epochs")
                                   if k in privacy}
    if args.key_bits > 0:
        comm = communication_report(args.data, key_bits=args.key_bits, epochs=5)
        out["communication_gb"] = comm["user_batches"]["gb"]
        out["communication_gb_rating_batches_64"] = comm["rating_batches"]["gb"]
        out["communication"] = comm
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
