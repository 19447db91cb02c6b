"""social-gnn benchmark on any social data set: LightGCN alone, P4GCN without and with DP, per slice; one JSON line.

Usage: python benchmarks/social_accuracy.py --data ../shared/data/ciaodvd --seeds 3 --epsilon 10
  --format filmtrust|ciaodvd|csv (detected when left out), --links FILE (CSV pair: the links file)
  --design once (default: one summary release under the whole budget + validated fusion) or
  per-epoch (the paper's schedule: forward and backward products every epoch compose; --variants picks
  from services.evaluation.social.run_variant, e.g. dp,dp-forward,nodp,lightgcn,dp-nolinks,fusion-only).
Slices of the test ratings: all, cold_start (the user has <= 5 training ratings), with_links, without_links.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.data.social import load_social
from services.evaluation.social import (
    COLD_MAX,
    FILMTRUST_MODEL,
    ONCE_VARIANTS,
    SLICES,
    VariantResult,
    run_once,
    run_variant,
    slice_masks,
    slice_metrics,
    train_config_for,
)
from services.evaluation.social_comm import communication_report
from services.p4gcn.trainer import SocialData, SocialTrainConfig, index_dataset

PER_EPOCH_NAMES = {"lightgcn": "lightgcn", "nodp": "p4gcn_nodp", "dp": "p4gcn_dp"}


def per_epoch(data: SocialData, cfg: SocialTrainConfig, epsilon: float, delta: float,
              variants: list[str]) -> dict[str, VariantResult]:
    """The paper's schedule (products every epoch), scored on the same slices."""
    masks = slice_masks(data, data.test)
    out = {}
    for variant in variants:
        name = PER_EPOCH_NAMES.get(variant, variant)
        res = run_variant(data, variant=variant, model_config=FILMTRUST_MODEL, config=cfg, epsilon=epsilon,
                          delta=delta)
        out[name] = VariantResult(res.test_pred, slice_metrics(res.test_pred, data.test, masks),
                                  {"privacy": res.privacy, "best_epoch": res.best_epoch})
    return out


def _stat(values: np.ndarray, f: Any) -> float | None:
    """f over the seeds where the slice is not empty (None when it is empty in every seed)."""
    kept = values[~np.isnan(values)]
    return round(float(f(kept)), 4) if kept.size else None


def summarise(per_seed: list[dict[str, VariantResult]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Mean and std over seeds of RMSE and MAE, per variant and slice."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for variant in per_seed[0]:
        out[variant] = {}
        for s in SLICES:
            rmse = np.array([r[variant].slices[s]["rmse"] for r in per_seed])
            mae = np.array([r[variant].slices[s]["mae"] for r in per_seed])
            n = np.array([r[variant].slices[s]["n"] for r in per_seed])
            out[variant][s] = {"rmse": _stat(rmse, np.mean), "rmse_std": _stat(rmse, np.std),
                               "mae": _stat(mae, np.mean), "ratings": int(n.mean())}
    return out


def main() -> None:
    """Run the variants over the seeds and print the JSON summary as the last line."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/filmtrust")
    ap.add_argument("--format", default=None, help="filmtrust | ciaodvd | csv (detected when left out)")
    ap.add_argument("--links", default=None, help="links CSV of a CSV pair (default: links.csv beside the ratings)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=30, help="max epochs (per-epoch design: the DP plan)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--delta", type=float, default=1e-4)
    ap.add_argument("--design", choices=("once", "per-epoch"), default="once")
    ap.add_argument("--variants", default="lightgcn,nodp,dp",
                    help="per-epoch design: variants of services.evaluation.social.run_variant (dp and lightgcn needed)")
    ap.add_argument("--ema-decay", type=float, default=0.97, help="weight EMA of the rating party (0: off)")
    ap.add_argument("--key-bits", type=int, default=0, help="> 0 adds the per-epoch communication measurement")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # the readers warn about duplicated pairs they drop
    t0 = time.time()
    per_seed: list[dict[str, VariantResult]] = []
    cold_users: list[int] = []
    name = "?"
    for seed in range(args.seeds):
        ds = load_social(args.data, fmt=args.format, links=args.links, seed=seed)
        name, data = ds.name, index_dataset(ds)
        cfg = train_config_for(ds.name, seed=seed, epochs=args.epochs, ema_decay=args.ema_decay)
        counts = np.bincount(data.train.users, minlength=data.n_users)
        cold_users.append(int(np.unique(data.test.users[counts[data.test.users] <= COLD_MAX]).size))
        if args.design == "once":
            res = run_once(data, model_config=FILMTRUST_MODEL, config=cfg, epsilon=args.epsilon, delta=args.delta,
                           variants=ONCE_VARIANTS)
        else:
            res = per_epoch(data, cfg, args.epsilon, args.delta, args.variants.split(","))
        per_seed.append(res)
        for v, r in res.items():
            print(f"seed {seed} {v}: " + " ".join(f"{s} {r.slices[s]['rmse']:.4f}" for s in SLICES)
                  + f" {json.dumps({k: x for k, x in r.record.items() if k != 'privacy'})}", file=sys.stderr,
                  flush=True)
    slices = summarise(per_seed)
    spent = [r["p4gcn_dp"].record["privacy"]["epsilon_spent"] for r in per_seed]
    out: dict[str, Any] = {
        "dataset": name, "design": args.design, "split": "random 80/10/10 (seeded)", "seeds": args.seeds,
        "epsilon": args.epsilon, "delta": args.delta, "epsilon_spent": round(max(spent), 4),
        "cold_start_users": int(np.mean(cold_users)), "cold_start_max_train_ratings": COLD_MAX,
        "user_batch": train_config_for(name, seed=0).user_batch, "slices": slices,
    }
    for v, s in slices.items():
        out[f"rmse_{v}"], out[f"rmse_{v}_std"], out[f"mae_{v}"] = s["all"]["rmse"], s["all"]["rmse_std"], s["all"]["mae"]
    priv = per_seed[-1]["p4gcn_dp"].record["privacy"]
    out["privacy_dp_last_seed"] = {k: priv[k] for k in ("epsilon_spent", "noise_multiplier", "sigma", "epochs",
                                                         "charged_units", "releases_per_unit") if k in priv}
    if args.design == "once":
        out["social_weight"] = {v: [r[v].record.get("social_weight") for r in per_seed] for v in per_seed[0]
                                if v != "lightgcn"}
        out["rmse_lightgcn_uncalibrated"] = round(float(np.mean([r["lightgcn"].record["raw"]["rmse"]
                                                                 for r in per_seed])), 4)
    if args.key_bits > 0:
        comm = communication_report(data, key_bits=args.key_bits, epochs=5, user_batch=cfg.user_batch)
        out["communication_gb"] = comm["user_batches"]["gb"]
        out["communication"] = comm
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
