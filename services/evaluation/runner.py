"""Multi-seed experiments: data loading by kind, protocols × seeds → summaries (presets re-exported)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.data.types import Dataset
from services.evaluation.harness import (
    RoundCallback,
    RunResult,
    build_federation,
    ensure_validation,
    run_protocol,
)
from services.evaluation.report import Summary
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.presets import MODEL_TUNING, PRESETS, PROTOCOL_TUNING, preset_values

__all__ = ["MODEL_TUNING", "PRESETS", "PROTOCOL_TUNING", "load_dataset", "preset_values", "run_seeds"]  # presets: services/verfedgnn/presets.py


def load_dataset(kind: str, path: str | Path, *, split: str, seed: int) -> Dataset:
    """Read a data set by kind; `split` is an official split name (ML-100K) or 'random' (60/20/20)."""
    if kind == "ml100k":
        from services.data.movielens import load_ml100k
        return load_ml100k(path, None if split == "random" else split, seed=seed)
    if kind == "filmtrust":
        from services.data.filmtrust import load_filmtrust
        return load_filmtrust(path, seed=seed, social=False)
    if kind == "csv":
        import numpy as np

        from services.data.csv import read_csv_ratings
        from services.data.splits import random_split
        train, valid, test = random_split(read_csv_ratings(path), (0.6, 0.2, 0.2), np.random.default_rng(seed))
        return Dataset(Path(path).stem, train, test, valid)
    if kind == "synthetic":
        from services.data.synthetic import generate
        return generate(1000, 800, 60_000, seed=seed)
    raise ValueError(f"unknown data set kind {kind!r}")


def run_seeds(*, dataset_kind: str, data: str | Path, split: str, n_parties: int, config: TrainConfig,
              protocols: Sequence[str], seeds: Sequence[int], valid_fraction: float = 0.1,
              on_round: RoundCallback | None = None) -> tuple[list[Summary], dict[str, list[float]]]:
    """Run every protocol for every seed; returns summaries and the first seed's validation curves."""
    summaries = {p: Summary(p) for p in protocols}
    histories: dict[str, list[float]] = {}
    for seed in seeds:
        ds = ensure_validation(load_dataset(dataset_kind, data, split=split, seed=seed),
                               fraction=valid_fraction, seed=seed)
        fed = build_federation(ds, n_parties=n_parties, seed=seed)
        cfg = config.model_copy(update={"seed": seed})
        for p in protocols:
            run: RunResult = run_protocol(fed, protocol=p, config=cfg, on_round=on_round)
            summaries[p].add(run)
            histories.setdefault("local (party0)" if p == "local" else p, run.valid_history)
    return [summaries[p] for p in protocols], histories
