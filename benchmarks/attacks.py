"""Privacy benchmark: the papers' attacks against the messages fedrec's engines really send.

For each protocol ("fedpergnn", "projection_only", "verfedgnn"; see services/attacks/suite.py):
- rmse: test RMSE of an accuracy run (early stopping on validation) on the honest federation;
- coordinator: the curious coordinator's least-squares attack on that run's first messages;
- deanonymization / gradient: the party attacks on a federation where the attacking party
  (party0) added one fake user per attacked victim (party1) item, for each attacker share.

Prints progress lines, then ONE JSON line (last):
{"deanonymization": {P: {S: {"precision", "recall", "f1", ...}}}, "gradient": {...},
 "coordinator": {P: {"f1", ...}, "verfedgnn_secure": {...}}, "rmse": {P: number}, ...}.
"coordinator"."verfedgnn_secure": the same attack on a secure-aggregation run (the default of coordinator
runs): the coordinator sees only the sums over both parties and does not know Φ or the item seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.attacks.suite import (  # noqa: E402
    PROTOCOLS,
    coordinator_figures,
    party_attacks,
    protocol_settings,
    run_recorded,
    secure_coordinator_figures,
)
from services.evaluation.harness import build_federation, ensure_validation  # noqa: E402
from services.evaluation.runner import PRESETS, PROTOCOL_TUNING, load_dataset, preset_values  # noqa: E402
from services.privacy.report import SCHEMA  # noqa: E402
from services.verfedgnn.config import TrainConfig  # noqa: E402


def _round(value: object) -> object:
    """Figures rounded to 4 decimals, recursively."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> None:
    """Run every protocol, attack it, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--model", default="gcn", choices=["gcn", "ggnn"])
    ap.add_argument("--preset", default="tuned", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shares", type=float, nargs="+", default=[0.2, 0.5, 0.8])
    ap.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=list(PROTOCOLS))
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--observed-rounds", type=int, default=20,
                    help="rounds the attacking party stacks in the multi-round least-squares de-anonymization")
    ap.add_argument("--no-plain", action="store_true", help="skip the no-privacy reference row")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write-reference", type=Path, default=None,
                    help="also write the figures as the versioned file the product ships "
                         "(services/privacy/measured_attacks.json)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.time()
    ds = ensure_validation(load_dataset("ml100k", args.data, split=args.split, seed=args.seed),
                           fraction=args.valid_fraction, seed=args.seed)
    fed = build_federation(ds, n_parties=2, seed=args.seed)
    base = TrainConfig(**{**preset_values(args.preset, args.model), "seed": args.seed})
    tuning = PROTOCOL_TUNING.get(args.preset, {})
    out: dict[str, Any] = {"deanonymization": {}, "gradient": {}, "coordinator": {}, "rmse": {},
                                         "deanonymization_multiround": {}}
    settings: dict[str, object] = {}

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", flush=True)

    for proto in args.protocols:
        setting = protocol_settings(proto, base, tuning=tuning)
        settings[proto] = setting.privacy_record()
        run = run_recorded(fed, protocol=proto, settings=setting, recorded_rounds=1, train=True)
        assert run.result is not None
        out["rmse"][proto] = run.result.rmse
        out["coordinator"][proto] = coordinator_figures(run)
        log(f"{proto}: rmse {run.result.rmse:.4f} (best round {run.result.best_round}), "
            f"coordinator f1 {out['coordinator'][proto]['f1']:.4f}")
        by_attack: dict[str, dict[str, object]] = {}
        for share in args.shares:
            figures = party_attacks(fed, protocol=proto, base=base, share=share, seed=args.seed, tuning=tuning,
                                    observed_rounds=args.observed_rounds)
            for attack, row in figures.items():
                by_attack.setdefault(attack, {})[str(share)] = row
            log(f"{proto} share {share}: " + ", ".join(f"{a} f1 {r['f1']:.4f}" for a, r in figures.items()))
        for attack, rows in by_attack.items():
            out[attack][proto] = rows
    if "verfedgnn" in args.protocols:  # the product's default coordinator run: masked messages, no seed
        out["coordinator"]["verfedgnn_secure"] = coordinator = secure_coordinator_figures(fed, base=base)
        log(f"verfedgnn with secure aggregation: coordinator f1 {coordinator['f1']:.4f} "
            f"(popularity {coordinator['popularity_f1']:.4f}, best message {coordinator['best_message']})")
    if not args.no_plain:  # no protection at all: what the attacks reach when nothing stands in their way
        share = max(args.shares)
        plain = party_attacks(fed, protocol="plain", base=base, share=share, seed=args.seed,
                              observed_rounds=args.observed_rounds)
        run = run_recorded(fed, protocol="plain", settings=protocol_settings("plain", base), recorded_rounds=1)
        out["reference_no_privacy"] = {"share": share, **plain, "coordinator": coordinator_figures(run)}
        log(f"plain share {share}: " + ", ".join(f"{a} f1 {r['f1']:.4f}" for a, r in plain.items()))
    out["setup"] = {"data": f"ml-100k {args.split} (validation: {args.valid_fraction} of train, seed {args.seed})",
                    "parties": 2, "attacker": "party0", "victim": "party1", "attacked_round": 0,
                    "observed_rounds": args.observed_rounds,
                    "model": args.model, "preset": args.preset, "protocol_tuning": tuning, "mechanisms": settings}
    out["seconds"] = round(time.time() - started, 1)
    if args.write_reference is not None:
        command = " ".join(["python", "benchmarks/attacks.py", *(sys.argv[1:] if argv is None else argv)])
        reference = {"schema": SCHEMA, "produced_by": command, "measured_at": date.today().isoformat(),
                     "setup": out["setup"], "seconds": out["seconds"],
                     "figures": {k: out[k] for k in ("deanonymization", "gradient", "deanonymization_multiround",
                                                     "coordinator", "rmse", "reference_no_privacy") if k in out}}
        args.write_reference.write_text(json.dumps(_round(reference), indent=1) + "\n")
    print(json.dumps(_round(out)))


if __name__ == "__main__":
    main()
