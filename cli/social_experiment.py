"""`fedrec experiment --protocol social-gnn`: P4GCN (rating party + social party) over seeds, per slice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

SOCIAL_PROTOCOL = "social-gnn"


def run_social(*, data: Path, seeds: int, out: Path, epochs: int = 30, epsilon: float = 10.0,
               delta: float = 1e-4, fmt: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Train LightGCN alone and P4GCN without/with DP (one summary release, validated fusion) on any social
    data set the readers know (format detected unless named); print and write the per-slice summary."""
    from services.data.social import SOCIAL_FORMATS, load_social
    from services.evaluation.social import FILMTRUST_MODEL, SLICES, run_once, train_config_for
    from services.p4gcn.trainer import index_dataset

    if fmt is not None and fmt not in SOCIAL_FORMATS:
        raise typer.BadParameter(f"unknown social format {fmt!r}; choose from {SOCIAL_FORMATS}")
    rows: dict[str, dict[str, list[float]]] = {}
    records: dict[str, list[object]] = {}
    for seed in range(seeds):
        ds = load_social(data, fmt=fmt, seed=seed)
        res = run_once(index_dataset(ds), model_config=FILMTRUST_MODEL,
                       config=train_config_for(ds.name, seed=seed, epochs=epochs), epsilon=epsilon, delta=delta)
        for v, r in res.items():
            for s in SLICES:
                rows.setdefault(v, {}).setdefault(s, []).append(r.slices[s]["rmse"])
            records.setdefault(v, []).append(r.record)
            typer.echo(f"seed {seed} {v}: " + " ".join(f"{s} {r.slices[s]['rmse']:.4f}" for s in SLICES))
    summary = {v: {s: {"rmse": float(np.mean(x)), "rmse_std": float(np.std(x))} for s, x in by.items()}
               for v, by in rows.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results-social.json").write_text(json.dumps({"slices": summary, "records": records}, indent=2,
                                                        default=str))
    typer.echo("| variant | " + " | ".join(SLICES) + " |\n|---" * (len(SLICES) + 1) + "|")
    for v, by in summary.items():
        typer.echo(f"| {v} | " + " | ".join(f"{by[s]['rmse']:.4f} ± {by[s]['rmse_std']:.4f}" for s in SLICES) + " |")
    return summary
