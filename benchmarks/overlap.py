"""Partial user overlap, cross-domain cold start, implicit feedback (issue 25): what a party gains by joining.

For 2 parties, items split at random and by genre, user overlap 1.0 / 0.5 / 0.2, explicit and
implicit feedback (ratings ≥ --implicit-threshold become interactions, the rest are dropped — the
rule of `fedrec data split --implicit`): per party and slice of its test users (aligned-warm,
aligned-cold: a seeded --cold-share of the aligned users keep at most --cold-keep training
interactions at this party, not-aligned), NDCG@10 and recall@10 of the party's local-only model
and of the federation on the party's own catalogue (services/evaluation/overlap_experiment.py),
beside the ceiling: the same model trained on every party's rows in one place, privacy off
(`central_ndcg@10`, `central_recall@10`).
Default run settings (preset tuned-ranking, a coordinator run's defaults, early stopping on
validation). Progress on stderr; the last stdout line is one JSON object {"runs": [...]}.
`--markdown FILE` prints the table and the bars of a saved JSON line instead of running.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from services.data.movielens import read_ml100k_genres
from services.evaluation import overlap_experiment as ox
from services.evaluation.harness import ensure_validation
from services.evaluation.runner import load_dataset
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig
from services.verfedgnn.presets import DEFAULT_PRESET, preset_values

MIN_USERS = 20  # the bars apply to rows with at least this many users
NOISE = 0.005
COLD_GAIN = 1.3
CEILING_GAP = 0.01


def log(msg: str) -> None:
    """Progress on stderr (stdout's last line is the JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_one(args: argparse.Namespace, seed: int, split: str, overlap: float, feedback: str) -> list[dict[str, Any]]:
    """One configuration's rows (runs in a worker process with --jobs)."""
    torch.set_num_threads(1)
    args = argparse.Namespace(**{**vars(args), "seed": seed})
    name = f"seed {seed} {split} overlap {overlap} {feedback}"
    started = time.perf_counter()
    ds = ensure_validation(load_dataset("ml100k", args.data, split=args.split, seed=args.seed),
                           fraction=args.valid_fraction, seed=args.seed)
    shares = ox.overlap_parties(ds, n_parties=2, seed=args.seed, overlap=overlap,
                                genres=read_ml100k_genres(args.data) if split == "genre" else None,
                                implicit=args.implicit_threshold if feedback == "implicit" else None,
                                cold_share=args.cold_share, cold_keep=args.cold_keep)
    values = {**RUN_DEFAULTS, **preset_values(DEFAULT_PRESET, "gcn"), "seed": args.seed}
    if args.rounds is not None:
        values["rounds"] = args.rounds
    if args.patience is not None:
        values["patience"] = args.patience
    for item in args.set:
        key, _, raw = item.partition("=")
        values[key] = json.loads(raw)
    config = TrainConfig(**values)
    rows = ox.run_configuration(shares, config=config, private=not args.no_private, log=lambda m: log(f"{name}: {m}"))
    for r in rows:
        log(f"{name}: {r['party']} {r['slice']:<12} users {r['users']:>3} NDCG@10 local {r['local_ndcg@10']:.4f} "
            f"federated {r['federated_ndcg@10']:.4f} served {r['served_ndcg@10']:.4f} central {r['central_ndcg@10']:.4f}")
    log(f"{name}: done in {time.perf_counter() - started:.0f}s")
    return [{"seed": seed, "split": split, "overlap": overlap, "feedback": feedback, **r} for r in rows]


def bars(runs: list[dict[str, Any]]) -> list[str]:
    """The issues' bars, one line each: every row with ≥ 20 users (served, and the federated model alone), the
    aligned-cold rows' mean served figure against the ceiling's, and aligned-cold at overlap 0.5 by genre."""
    out = []
    served = [r for r in runs if "served_ndcg@10" in r]
    if served:
        big = [r for r in served if r["users"] >= MIN_USERS]
        worse = [r for r in big if r["served_ndcg@10"] < r["local_ndcg@10"] - NOISE]
        out.append(f"{'PASS' if not worse else 'FAIL'} served not worse: {len(big) - len(worse)}/{len(big)} rows "
                   f"with ≥ {MIN_USERS} users serve ≥ local − {NOISE}")
        cold = [r for r in served if r["slice"] == "aligned-cold"]
        if cold:
            s_mean = sum(r["served_ndcg@10"] for r in cold) / len(cold)
            c_mean = sum(r["central_ndcg@10"] for r in cold) / len(cold)
            seeds = sorted({int(r.get("seed", 0)) for r in cold})
            out.append(f"{'PASS' if s_mean >= c_mean - CEILING_GAP else 'FAIL'} aligned-cold vs ceiling: mean served "
                       f"{s_mean:.4f} vs central {c_mean:.4f} − {CEILING_GAP} over {len(cold)} rows, seeds {seeds}")
    for r in runs:
        tag = (f"seed {r.get('seed', 0)} {r['split']} {r['overlap']} {r['feedback']} {r['party']} {r['slice']} "
               f"({r['users']} users)")
        if "served_ndcg@10" in r and r["users"] >= MIN_USERS:
            ok = r["served_ndcg@10"] >= r["local_ndcg@10"] - NOISE
            out.append(f"{'PASS' if ok else 'FAIL'} served not worse: {tag} served {r['served_ndcg@10']:.4f} "
                       f"vs local {r['local_ndcg@10']:.4f} - {NOISE}")
        if r["users"] >= MIN_USERS:
            ok = r["federated_ndcg@10"] >= r["local_ndcg@10"] - NOISE
            out.append(f"{'PASS' if ok else 'FAIL'} not worse: {tag} federated {r['federated_ndcg@10']:.4f} "
                       f"vs local {r['local_ndcg@10']:.4f} - {NOISE}")
        if r["slice"] == "aligned-cold" and r["overlap"] == 0.5 and r["split"] == "genre":
            ok = r["federated_ndcg@10"] >= COLD_GAIN * r["local_ndcg@10"]
            out.append(f"{'PASS' if ok else 'FAIL'} cold gain: {tag} federated {r['federated_ndcg@10']:.4f} "
                       f"vs {COLD_GAIN} × local {r['local_ndcg@10']:.4f}")
    return out


def _opt(row: dict[str, Any], key: str) -> str:
    """A figure a saved line from before it was measured lacks: '-'."""
    return f"{row[key]:.4f}" if key in row else "-"


def markdown(runs: list[dict[str, Any]]) -> str:
    """The table of docs/results-overlap.md."""
    lines = [("| seed | split | overlap | feedback | party | slice | users | NDCG@10 local | NDCG@10 federated | "
              "NDCG@10 served | recall@10 local | recall@10 federated | NDCG@10 central |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.get('seed', 0)} | {r['split']} | {r['overlap']} | {r['feedback']} | {r['party']} "
                     f"| {r['slice']} | {r['users']} | {r['local_ndcg@10']:.4f} | {r['federated_ndcg@10']:.4f} "
                     f"| {_opt(r, 'served_ndcg@10')} | {r['local_recall@10']:.4f} | {r['federated_recall@10']:.4f} "
                     f"| {_opt(r, 'central_ndcg@10')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run every configuration (or render a saved JSON line with --markdown) and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data/ml-100k", help="MovieLens-100K directory")
    ap.add_argument("--split", default="u1", help="official ML-100K split (validation carved from its base)")
    ap.add_argument("--seed", default="0", help="a seed or a comma-separated list (e.g. 0,1,2)")
    ap.add_argument("--by", nargs="+", default=["random", "genre"], choices=["random", "genre"])
    ap.add_argument("--overlaps", nargs="+", type=float, default=[1.0, 0.5, 0.2])
    ap.add_argument("--feedback", nargs="+", default=["explicit", "implicit"], choices=["explicit", "implicit"])
    ap.add_argument("--implicit-threshold", type=float, default=4.0)
    ap.add_argument("--cold-share", type=float, default=0.2, help="share of the aligned users cold at each party")
    ap.add_argument("--cold-keep", type=int, default=2, help="training interactions a cold user keeps at the party")
    ap.add_argument("--valid-fraction", type=float, default=float(preset_values(DEFAULT_PRESET, "gcn")["valid_fraction"]))
    ap.add_argument("--rounds", type=int, default=None, help="round cap (default: the preset's)")
    ap.add_argument("--patience", type=int, default=None, help="early-stopping patience (default: the preset's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a run setting, e.g. use_quantization=false (the local and central models never "
                    "use projection or quantization, so privacy switches change the federation only)")
    ap.add_argument("--quick", action="store_true",
                    help="development: genre split, overlap 0.5 (--feedback as given), 40 rounds, patience 10")
    ap.add_argument("--no-private", action="store_true",
                    help="the federation trains the aligned users only (non-aligned users: popularity fallback)")
    ap.add_argument("--jobs", type=int, default=1, help="configurations run in this many processes at once")
    ap.add_argument("--markdown", type=Path, default=None, help="render a saved JSON line (table and bars) and exit")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        runs = json.loads(args.markdown.read_text().strip().splitlines()[-1])["runs"]
        print(markdown(runs))
        print()
        print("\n".join(f"- {b}" for b in bars(runs)))
        return
    if args.quick:
        args.by, args.overlaps = ["genre"], [0.5]
        args.rounds = args.rounds or 40
        args.patience = args.patience or 10
    torch.set_num_threads(1)
    seeds = [int(x) for x in str(args.seed).split(",") if x.strip()]
    configs = list(itertools.product(seeds, args.by, args.overlaps, args.feedback))
    log(f"{len(configs)} configurations, {args.jobs} at a time")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_one, args, *c) for c in configs]
        runs = [row for f in futures for row in f.result()]
    for line in bars(runs):
        log(line)
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
