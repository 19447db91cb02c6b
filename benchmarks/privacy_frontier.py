"""The privacy frontier (issue 31, item 2): attack F1 against utility over VerFedGNN's privacy dials.

For each point of a grid over the dials (`q_ratio`, the ternary quantization level `r`,
`grad_scale`, `clip_bound`; every other setting from the preset):
- attacks: the VerFedGNN paper's party attacks on the real messages of the point's settings
  (services/attacks/suite.py::party_attacks, as benchmarks/attacks.py runs them): de-anonymization
  by the attacking party and the gradient attack by the coordinator, at each attacker share; the
  row keeps every F1 and the max per attacker;
- utility: one federated run of the point's settings in the ranking harness benchmarks/ranking.py
  uses (services/evaluation/ranking_experiment.py::run_federated, a coordinator run's defaults:
  secure aggregation on), early-stopped on validation: merged test NDCG@10 and test RMSE.

A row is `ok` when its max F1 over both attackers and every share is ≤ --max-f1; `best_ok` is
the ok row with the highest merged NDCG@10 (test RMSE breaks ties); `default` marks the preset's
own dials. Each point's attack and utility figures are cached as JSON under --cache (a file per
point and part, keyed by everything that changes them), so a rerun only computes what is missing.

Prints progress on stderr, then ONE JSON line on stdout:
{"rows": [{"q_ratio", "r", "grad_scale", "clip_bound", "default", "ok", "best_ok",
           "max_f1": {"deanonymization", "gradient"}, "f1": {attack: {share: f1}},
           "ndcg@10", "rmse", "best_round"}, ...],
 "best_ok": {dials} | null, "default": {dials}, "missing": [{dials} not measured (--cached-only)],
 "setup": {...}, "seconds": s}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.attacks.suite import party_attacks  # noqa: E402
from services.evaluation import ranking_experiment as rx  # noqa: E402
from services.evaluation import topk  # noqa: E402
from services.evaluation.harness import Federation, build_federation, ensure_validation  # noqa: E402
from services.evaluation.runner import PRESETS, load_dataset, preset_values  # noqa: E402
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig  # noqa: E402
from services.verfedgnn.presets import DEFAULT_PRESET  # noqa: E402
from services.verfedgnn.types import PartyData  # noqa: E402

DIALS = ("q_ratio", "r", "grad_scale", "clip_bound")
ATTACKS = ("deanonymization", "gradient")
# Bump when the way a part is computed changes, so cached figures of the old way are not reused.
CACHE_VERSION = 1

# The committed grid: the preset's point, then one dial moved at a time (each relative to the preset).
GRID: tuple[dict[str, float], ...] = (
    {},
    {"q_ratio": 0.3}, {"q_ratio": 0.5},
    {"r": 2.0}, {"r": 5.0},
    {"grad_scale": 0.025}, {"grad_scale": 0.1},
    {"clip_bound": 0.25}, {"clip_bound": 1.0},
)


def log(msg: str) -> None:
    """Progress on stderr (stdout's only line is the JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_point(text: str) -> dict[str, float]:
    """A grid point from 'q_ratio=0.3,r=2' (only the dials; empty string: the preset's point)."""
    point: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in DIALS:
            raise argparse.ArgumentTypeError(f"point {text!r}: {item!r} is not DIAL=NUMBER with DIAL in {DIALS}")
        try:
            point[key] = float(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"point {text!r}: {value!r} is not a number") from exc
    return point


def dials(config: TrainConfig) -> dict[str, float]:
    """The dial values of a run's settings."""
    return {k: float(getattr(config, k)) for k in DIALS}


def cache_key(part: str, identity: Mapping[str, Any]) -> str:
    """The file stem of a cached part: readable dials plus a hash of everything that changes the figures."""
    blob = json.dumps({"part": part, "version": CACHE_VERSION, **identity}, sort_keys=True)
    d = identity["dials"]
    stem = "_".join(f"{k}{d[k]:g}" for k in DIALS)
    return f"{part}_{stem}_{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def is_cached(cache: Path, key: str) -> bool:
    """Whether the part is in the cache."""
    return (cache / f"{key}.json").exists()


def cached(cache: Path, key: str, compute: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The part's figures from `cache`/key.json if present, else computed and written there; (figures, hit)."""
    path = cache / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text()), True
    figures = compute()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(figures))
    tmp.replace(path)  # a run killed mid-write leaves no half file behind
    return figures, False


def attack_federation(kind: str, data: str, *, split: str, seed: int, valid_fraction: float) -> Federation:
    """The federation the attacks run on (as benchmarks/attacks.py builds it): 2 parties, validation carved."""
    ds = ensure_validation(load_dataset(kind, data, split=split, seed=seed), fraction=valid_fraction, seed=seed)
    return build_federation(ds, n_parties=2, seed=seed)


def ranking_federation(kind: str, data: str, *, split: str, seed: int,
                       valid_fraction: float) -> tuple[Mapping[str, PartyData], topk.RankingView]:
    """The parties and ranking view of the utility run (as benchmarks/ranking.py builds them)."""
    parties = rx.seed_parties(kind, data, split=split, n_parties=2, seed=seed, valid_fraction=valid_fraction)
    return parties, topk.ranking_view(parties)


def attack_figures(fed: Federation, *, config: TrainConfig, shares: Sequence[float], seed: int) -> dict[str, Any]:
    """F1 (and precision, recall, popularity F1) of both party attacks at each share, at these settings."""
    out: dict[str, dict[str, dict[str, float]]] = {a: {} for a in ATTACKS}
    for share in shares:
        figures = party_attacks(fed, protocol="verfedgnn", base=config, share=share, seed=seed)
        for attack in ATTACKS:
            row = figures[attack]
            out[attack][str(share)] = {k: row[k] for k in ("f1", "precision", "recall", "popularity_f1")}
    return out


def utility_figures(parties: Mapping[str, PartyData], view: topk.RankingView, *, config: TrainConfig) -> dict[str, Any]:
    """Merged test NDCG@10, test RMSE and best round of one federated run at these settings."""
    fed = rx.run_federated(parties, view, config=config)[0]["federated"]
    return {"ndcg@10": fed["ndcg@10"], "recall@10": fed["recall@10"], "rmse": fed["rmse"],
            "best_round": fed["best_round"]}


def summarize(rows: list[dict[str, Any]], *, max_f1: float) -> dict[str, float] | None:
    """Mark each row `ok` (max F1 over attackers and shares ≤ max_f1) and the best ok row; its dials or None.

    Best = highest merged NDCG@10, then lowest test RMSE.
    """
    for row in rows:
        row["max_f1"] = {a: max(row["f1"][a].values()) for a in ATTACKS}
        row["ok"] = max(row["max_f1"].values()) <= max_f1
        row["best_ok"] = False
    ok = [r for r in rows if r["ok"]]
    if not ok:
        return None
    best = max(ok, key=lambda r: (r["ndcg@10"], -r["rmse"]))
    best["best_ok"] = True
    return {k: best[k] for k in DIALS}


def plot(rows: Sequence[Mapping[str, Any]], path: Path, *, max_f1: float, title: str) -> None:
    """Max attack F1 against merged NDCG@10 and test RMSE, one labelled point per row (PNG via matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "ndcg@10", "merged test NDCG@10 (higher is better)"),
                           (axes[1], "rmse", "test RMSE (lower is better)")):
        for row in rows:
            x = max(row["max_f1"].values())
            colour = "tab:green" if row["ok"] else "tab:red"
            marker = "*" if row["default"] else ("D" if row["best_ok"] else "o")
            ax.scatter([x], [row[key]], c=colour, marker=marker, s=120 if row["default"] else 40, zorder=3)
            ax.annotate(row["label"], (x, row[key]), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axvline(max_f1, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("max attack F1 (de-anonymization, gradient; shares 0.2/0.5/0.8)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}  (dashed: F1 bar {max_f1}; star: default; green: within the bar)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def label(point: Mapping[str, float]) -> str:
    """A row's short name: the dials it moves from the preset, or 'default'."""
    return ",".join(f"{k}={v:g}" for k, v in point.items()) or "default"


def main(argv: list[str] | None = None) -> None:
    """Measure every grid point (cached parts reused) and print the frontier."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--dataset", default="ml100k")
    ap.add_argument("--split", default="u1")
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shares", type=float, nargs="+", default=[0.2, 0.5, 0.8])
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--point", type=parse_point, action="append", default=None, metavar="DIAL=V,...",
                    help="measure this point instead of the committed grid (repeatable; '' = the preset's point)")
    ap.add_argument("--max-f1", type=float, default=0.02, help="the protection requirement (issue 31)")
    ap.add_argument("--cache", type=Path, default=Path("/work/scratch-frontier"),
                    help="per-point results (keep it outside the repository)")
    ap.add_argument("--plot", type=Path, default=None, help="also write the frontier plot here (PNG)")
    ap.add_argument("--cached-only", action="store_true",
                    help="report only the points whose figures are all cached; list the others under 'missing'")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.time()
    values = preset_values(args.preset, args.model)
    default = dials(TrainConfig(**values))
    points = args.point if args.point is not None else [dict(p) for p in GRID]
    data = str(Path(args.data).resolve())
    ident = {"data": data, "dataset": args.dataset, "split": args.split, "seed": args.seed, "model": args.model,
             "preset": values, "valid_fraction": args.valid_fraction}
    loaded: dict[str, Any] = {}  # each federation is built once, and only if a point needs computing

    def attack_fed() -> Federation:
        if "attack" not in loaded:
            loaded["attack"] = attack_federation(args.dataset, args.data, split=args.split, seed=args.seed,
                                                 valid_fraction=args.valid_fraction)
        return loaded["attack"]

    def ranking_parties() -> tuple[Mapping[str, PartyData], topk.RankingView]:
        if "ranking" not in loaded:
            loaded["ranking"] = ranking_federation(args.dataset, args.data, split=args.split, seed=args.seed,
                                                   valid_fraction=args.valid_fraction)
        return loaded["ranking"]

    rows: list[dict[str, Any]] = []
    missing: list[dict[str, float]] = []
    for point in points:
        config = TrainConfig(**{**values, **point, "seed": args.seed})  # validates r >= clip_bound
        run_config = TrainConfig(**{**RUN_DEFAULTS, **values, **point, "seed": args.seed})
        point_dials = dials(config)
        attack_key = cache_key("attacks", {**ident, "dials": point_dials, "shares": list(args.shares)})
        utility_key = cache_key("utility", {**ident, "dials": point_dials, "run_defaults": RUN_DEFAULTS})
        if args.cached_only and not (is_cached(args.cache, attack_key) and is_cached(args.cache, utility_key)):
            missing.append(point_dials)
            continue

        def compute_attacks(c: TrainConfig = config) -> dict[str, Any]:
            return attack_figures(attack_fed(), config=c, shares=args.shares, seed=args.seed)

        def compute_utility(c: TrainConfig = run_config) -> dict[str, Any]:
            return utility_figures(*ranking_parties(), config=c)

        attacks, hit_a = cached(args.cache, attack_key, compute_attacks)
        utility, hit_u = cached(args.cache, utility_key, compute_utility)
        row: dict[str, Any] = {"label": label(point), **point_dials, "default": point_dials == default,
                               "f1": {a: {s: f["f1"] for s, f in attacks[a].items()} for a in ATTACKS},
                               "popularity_f1": {a: {s: f["popularity_f1"] for s, f in attacks[a].items()}
                                                 for a in ATTACKS},
                               **utility}
        rows.append(row)
        log(f"{row['label']}: F1 de-anon {row['f1']['deanonymization']} gradient {row['f1']['gradient']} "
            f"NDCG@10 {utility['ndcg@10']:.4f} RMSE {utility['rmse']:.4f} round {utility['best_round']}"
            f"{' (cached)' if hit_a and hit_u else ''} [{time.time() - started:.0f}s]")
    best = summarize(rows, max_f1=args.max_f1)
    if args.plot is not None:
        plot(rows, args.plot, max_f1=args.max_f1,
             title=f"{args.dataset} {args.split}, preset {args.preset}, seed {args.seed}")
    out = {"rows": rows, "best_ok": best, "default": default, "missing": missing,
           "setup": {"data": f"{args.dataset} {args.split} (validation: {args.valid_fraction} of train, "
                             f"seed {args.seed})", "parties": 2, "preset": args.preset, "model": args.model,
                     "shares": args.shares, "max_f1": args.max_f1, "attacker": "party0", "victim": "party1",
                     "attacked_round": 0, "utility": "one federated run, secure aggregation, early stopping"},
           "seconds": round(time.time() - started, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
