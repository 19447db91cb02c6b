"""`fedrec experiment`: train centralized / federated / local-only over seeds and write a report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.social_experiment import SOCIAL_PROTOCOL, run_social
from services.evaluation import ranking_experiment as rx
from services.evaluation import topk
from services.evaluation.report import (
    markdown_table,
    plot_ranking_curve,
    ranking_table,
    write_report,
)
from services.evaluation.runner import PRESETS, preset_values, run_seeds
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig
from services.verfedgnn.types import RoundMetrics

PROTOCOL_SETS = {"all": ["centralized", "federated", "local"], "federated": ["federated"],
                 "local": ["local"], "centralized": ["centralized"]}


def build_config(preset: str | None, overrides: dict[str, Any]) -> TrainConfig:
    """Preset values (with the preset's adjustments for the model), then explicit overrides (None: not given)."""
    model = overrides.get("model") or "gcn"
    base: dict[str, Any] = preset_values(preset or "tuned", model)
    base.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig(**base)


Opt = typer.Option


def run(data: Annotated[Path, Opt(help="data set directory or file")],
        dataset: Annotated[str, Opt(help="ml100k | filmtrust | ciaodvd | csv | synthetic")] = "ml100k",
        split: Annotated[str, Opt(help="official split (u1..u5, ua, ub) or random (60/20/20)")] = "u1",
        parties: Annotated[int, Opt(min=1)] = 2,
        model: Annotated[str, Opt(help="gcn | gat | ggnn | mf")] = "gcn",
        protocol: Annotated[str, Opt(help="federated | local | centralized | all")] = "all",
        q_ratio: Annotated[float | None, Opt()] = None,
        r: Annotated[float | None, Opt()] = None,
        alpha: Annotated[float | None, Opt()] = None,
        seeds: Annotated[int, Opt(min=1)] = 5,
        rounds: Annotated[int | None, Opt()] = None,
        preset: Annotated[str | None, Opt(help="verfedgnn-paper | tuned (default)")] = None,
        valid_fraction: Annotated[float, Opt(help="carved from train when there is no validation split")] = 0.1,
        ranking: Annotated[bool, Opt(help="top-K figures beside RMSE: federated (preset tuned-ranking unless "
                                          "--preset), each party alone, centralized baselines")] = False,
        out: Annotated[Path, Opt(help="output directory")] = Path("var/experiment")) -> None:
    """Train and evaluate; writes results.md, results.json and valid_rmse.png (ranking.png with --ranking) under OUT."""
    if protocol == SOCIAL_PROTOCOL:  # hook: P4GCN rating party + social party (cli/social_experiment.py)
        run_social(data=data, seeds=seeds, out=out, epochs=rounds or 30,
                   fmt=dataset if dataset in ("filmtrust", "ciaodvd", "csv") else None)
        return
    if preset is not None and preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    if protocol not in PROTOCOL_SETS:
        raise typer.BadParameter(f"unknown protocol {protocol!r}")
    if ranking:
        # A coordinator run's defaults (secure aggregation): the figures are those of the model a default run serves.
        config = build_config(preset or "tuned-ranking", {**RUN_DEFAULTS, "model": model, "q_ratio": q_ratio, "r": r,
                                                          "alpha": alpha, "rounds": rounds})
        run_ranking(dataset=dataset, data=data, split=split, parties=parties, seeds=seeds, config=config,
                    valid_fraction=valid_fraction, out=out)
        return
    config = build_config(preset, {"model": model, "q_ratio": q_ratio, "r": r, "alpha": alpha, "rounds": rounds})
    protocols = PROTOCOL_SETS[protocol]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[valid]}"),
                  TimeElapsedColumn()) as progress:
        task = progress.add_task("rounds", total=config.rounds, valid="")

        def on_round(name: str, m: RoundMetrics) -> None:
            if m.round_index == 0:
                progress.reset(task, total=config.rounds)
            progress.update(task, advance=1, description=f"{name}", valid=f"valid RMSE {m.rmse['valid']:.4f}")

        summaries, histories = run_seeds(dataset_kind=dataset, data=data, split=split, n_parties=parties,
                                         config=config, protocols=protocols, seeds=list(range(seeds)),
                                         valid_fraction=valid_fraction, on_round=on_round)
    title = f"{dataset} {split}, {parties} parties, {model}, {seeds} seeds"
    write_report(out, summaries, histories, title=title, config=config.model_dump())
    typer.echo(markdown_table(summaries, title=title))
    typer.echo(json.dumps({s.protocol: s.stats() for s in summaries}))


def run_ranking(*, dataset: str, data: Path, split: str, parties: int, seeds: int, config: TrainConfig,
                valid_fraction: float, out: Path) -> None:
    """Ranking beside RMSE: mean over seeds, one table; NDCG@10 and validation RMSE over rounds plotted."""
    rows: dict[str, list[dict[str, float]]] = {}
    curve: list[dict[str, float]] = []
    for seed in range(seeds):
        fed = rx.seed_parties(dataset, data, split=split, n_parties=parties, seed=seed, valid_fraction=valid_fraction)
        view = topk.ranking_view(fed)
        typer.echo(f"seed {seed}: federated", err=True)
        got, seed_curve = rx.run_federated(fed, view, config=config.model_copy(update={"seed": seed}))
        curve = curve or seed_curve
        rows.setdefault("federated (merged lists)", []).append(got["federated"])
        for row in got["federated_per_party"]:
            rows.setdefault(f"federated, {row['party']} catalogue", []).append(row)
        typer.echo(f"seed {seed}: each party alone", err=True)
        for row in rx.run_local(fed, view, config=config.model_copy(update={"seed": seed})):
            rows.setdefault(f"{row['party']} alone, own catalogue", []).append(row)
        typer.echo(f"seed {seed}: centralized baselines", err=True)
        for name, row in rx.run_baselines(fed, view, seed=seed).items():
            rows.setdefault(f"{name} (centralized)", []).append(row)
    means = {name: rx.mean_rows(r) for name, r in rows.items()}
    title = f"{dataset} {split}, {parties} parties, {config.model}, {seeds} seeds: top-K (SPEC §5) and test RMSE"
    table = ranking_table(means, title=title)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(table + "\n```json\n" + json.dumps(config.model_dump(), indent=1) + "\n```\n")
    (out / "results.json").write_text(json.dumps(means, indent=1))
    plot_ranking_curve(curve, out / "ranking.png")
    typer.echo(table)


def register(app: typer.Typer) -> None:
    """Attach `fedrec experiment` to the root CLI."""
    app.command(name="experiment", help="Train centralized / federated / local-only models and report RMSE.")(run)
