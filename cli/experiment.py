"""`fedrec experiment`: train centralized / federated / local-only over seeds and write a report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.social_experiment import SOCIAL_PROTOCOL, run_social
from services.evaluation.report import markdown_table, write_report
from services.evaluation.runner import PRESETS, preset_values, run_seeds
from services.verfedgnn.config import TrainConfig
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
        out: Annotated[Path, Opt(help="output directory")] = Path("var/experiment")) -> None:
    """Train and evaluate; writes results.md, results.json and valid_rmse.png under OUT."""
    if protocol == SOCIAL_PROTOCOL:  # hook: P4GCN rating party + social party (cli/social_experiment.py)
        run_social(data=data, seeds=seeds, out=out, epochs=rounds or 30,
                   fmt=dataset if dataset in ("filmtrust", "ciaodvd", "csv") else None)
        return
    if preset is not None and preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    if protocol not in PROTOCOL_SETS:
        raise typer.BadParameter(f"unknown protocol {protocol!r}")
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


def register(app: typer.Typer) -> None:
    """Attach `fedrec experiment` to the root CLI."""
    app.command(name="experiment", help="Train centralized / federated / local-only models and report RMSE.")(run)
