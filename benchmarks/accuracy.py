"""Accuracy benchmark: centralized vs federated (privacy on) vs local-only on one data set.

Prints progress lines, then ONE JSON line (last) with "centralized", "federated" and
"local_only" (one entry per party), each {"rmse_mean", "rmse_std", "mae_mean"}. A data set's side information
is used by default (ML-100K: user features at party 0, item features at their item's party) and the run adds
"federated_no_features", the same federation without it; `--no-features` leaves it out everywhere.
"federated" is what a release serves: the federated model combined with each party's own rating component
(services.party.rating_component); "federated_unblended" is the federated model alone and
"local_component" the parties' components alone (pooled over the parties' test ratings).
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

from services.data.features import side_information
from services.evaluation.harness import (
    build_federation,
    ensure_validation,
    run_protocol,
    with_features,
)
from services.evaluation.rating_component import run_blended
from services.evaluation.runner import PRESETS, load_dataset, preset_values
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.rating_component import ComponentConfig


def stats(rmse: list[float], mae: list[float]) -> dict[str, float]:
    """Mean/std of RMSE and mean MAE over seeds."""
    return {"rmse_mean": float(np.mean(rmse)), "rmse_std": float(np.std(rmse)), "mae_mean": float(np.mean(mae))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--dataset", default="ml100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--preset", default="tuned", choices=sorted(PRESETS))
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides key=json-value")
    ap.add_argument("--no-features", action="store_true", help="leave the data set's side information out")
    ap.add_argument("--component", default="{}", help="rating component settings (JSON, ComponentConfig)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    config = TrainConfig(**{**preset_values(args.preset, args.model), **overrides})
    component = ComponentConfig(**json.loads(args.component))
    res: dict[str, tuple[list[float], list[float]]] = {"centralized": ([], []), "federated": ([], []),
                                                       "federated_unblended": ([], []), "local_component": ([], [])}
    local: dict[str, tuple[list[float], list[float]]] = {}
    side = None if args.no_features else side_information(args.dataset, args.data)
    if side is not None:
        res["federated_no_features"] = ([], [])
    started = time.time()
    for seed in range(args.seeds):
        ds = ensure_validation(load_dataset(args.dataset, args.data, split=args.split, seed=seed),
                               fraction=args.valid_fraction, seed=seed)
        plain = build_federation(ds, n_parties=args.parties, seed=seed)
        fed = plain if side is None else with_features(plain, users=side[0], items=side[1])
        cfg = config.model_copy(update={"seed": seed})
        for proto in ("centralized", "federated", "local") + (("federated_no_features",) if side else ()):
            if proto == "federated_no_features":
                run = run_protocol(plain, protocol="federated", config=cfg)
            elif proto == "federated":  # the served combination, the federated model alone, the component alone
                blended = run_blended(fed, config=cfg, component=component)
                run = blended.run
                for key, rmse, mae in (("federated_unblended", blended.rmse_unblended, blended.mae_unblended),
                                       ("local_component", blended.rmse_component, blended.mae_component)):
                    res[key][0].append(rmse)
                    res[key][1].append(mae)
                run.rmse, run.mae = blended.rmse, blended.mae
                print(f"seed {seed} federated_unblended: rmse {blended.rmse_unblended:.4f} local_component: rmse "
                      f"{blended.rmse_component:.4f} per_party {blended.per_party}", flush=True)
            else:
                run = run_protocol(fed, protocol=proto, config=cfg)
            if proto == "local":
                for party, row in sorted(run.per_party.items()):
                    local.setdefault(party, ([], []))
                    local[party][0].append(row["rmse"])
                    local[party][1].append(row["mae"])
            else:
                res[proto][0].append(run.rmse)
                res[proto][1].append(run.mae)
            fed_pp = {k: round(v["rmse"], 4) for k, v in run.per_party.items()}
            print(f"seed {seed} {proto}: rmse {run.rmse:.4f} mae {run.mae:.4f} best_round {run.best_round} "
                  f"per_party {fed_pp} [{time.time() - started:.0f}s]", flush=True)
    out = {k: stats(*v) for k, v in res.items()}
    out["local_only"] = [{"party": p, **stats(*v)} for p, v in sorted(local.items())]
    out["config"] = config.model_dump()
    out["component"] = component.model_dump()
    out["seconds"] = round(time.time() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
