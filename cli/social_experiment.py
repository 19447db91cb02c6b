"""`fedrec experiment --protocol social-gnn`: P4GCN (rating party + social party) over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

SOCIAL_PROTOCOL = "social-gnn"
VARIANTS = ("dp", "dp-forward", "nodp", "lightgcn", "fusion-only")


def run_social(*, data: Path, seeds: int, out: Path, epochs: int = 30, epsilon: float = 15.0,
               delta: float = 1e-4, variants: tuple[str, ...] = VARIANTS) -> dict[str, dict[str, float]]:
    """Train every variant on FilmTrust (random 80/10/10 split per seed); print and write the summary."""
    from services.data.filmtrust import load_filmtrust
    from services.evaluation.social import FILMTRUST_MODEL, filmtrust_train_config, run_variant
    from services.p4gcn.trainer import index_dataset

    rows: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for seed in range(seeds):
        indexed = index_dataset(load_filmtrust(data, seed=seed, ratios=(0.8, 0.1, 0.1)))
        cfg = filmtrust_train_config(seed=seed, epochs=epochs)
        for v in variants:
            res = run_variant(indexed, variant=v, model_config=FILMTRUST_MODEL, config=cfg, epsilon=epsilon,
                              delta=delta)
            rows[v].append((res.rmse, res.mae))
            typer.echo(f"seed {seed} {v}: RMSE {res.rmse:.4f} MAE {res.mae:.4f}")
    summary = {v: {"rmse": float(np.mean([r for r, _ in x])), "rmse_std": float(np.std([r for r, _ in x])),
                   "mae": float(np.mean([m for _, m in x]))} for v, x in rows.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results-social.json").write_text(json.dumps(summary, indent=2))
    typer.echo("| variant | RMSE | MAE |\n|---|---|---|")
    for v, s in summary.items():
        typer.echo(f"| {v} | {s['rmse']:.4f} ± {s['rmse_std']:.4f} | {s['mae']:.4f} |")
    return summary
