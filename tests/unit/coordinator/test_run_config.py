"""Run settings: the default is the ranking benchmark's model, presets resolve, the settings doc cannot go stale."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from services.coordinator.run_config import (
    RUN_CONFIG_MODELS,
    PresetName,
    WarmSource,
    WarmStartRefused,
    default_run_config,
    engine_config,
    resolve_run,
    settings_doc_blocks,
)
from services.evaluation.runner import PRESETS, preset_values
from services.fedpergnn.config import FedPerGNNConfig, FedPerGNNRunConfig
from services.verfedgnn.config import RUN_DEFAULTS, TrainConfig, VerFedGNNRunConfig

ENGINE_DOC = Path(__file__).resolve().parents[3] / "docs" / "engine.md"


def test_the_default_run_trains_what_the_ranking_benchmark_measures() -> None:
    # benchmarks/ranking.py::run_seed: TrainConfig(**{**RUN_DEFAULTS, **preset_values(preset, model), "seed": seed})
    benchmark = TrainConfig(**{**RUN_DEFAULTS, **preset_values("tuned-ranking", "gcn"), "seed": 3})
    resolved = default_run_config(seed=3)
    assert resolved.engine == benchmark and resolved.preset == "tuned-ranking"
    assert resolved.rounds == benchmark.rounds and benchmark.patience < benchmark.rounds  # early stopping can act
    assert engine_config(resolved.config, seed=3, rounds=resolved.rounds) == benchmark  # the stored form reads back


def test_explicit_settings_override_the_preset_and_unset_ones_keep_it() -> None:
    resolved = resolve_run(config=VerFedGNNRunConfig(dim=40, rank_dims=8), preset="tuned-ranking", rounds=5, seed=0)
    assert isinstance(resolved.engine, TrainConfig)
    assert (resolved.engine.dim, resolved.engine.rank_dims, resolved.engine.rounds) == (40, 8, 5)
    assert resolved.engine.weight_decay == 60.0 and resolved.engine.secure_aggregation
    off = resolve_run(config=VerFedGNNRunConfig(secure_aggregation=False), preset="tuned", rounds=None, seed=0)
    assert not off.config["secure_aggregation"] and off.rounds == PRESETS["tuned"]["rounds"]


def test_fedpergnn_settings_nest_the_gnn_under_train_over_its_preset() -> None:
    model = FedPerGNNRunConfig.model_validate({"protocol": "fedpergnn", "ldp_scale": 0.5, "train": {"dim": 8}})
    resolved = resolve_run(config=model, preset=None, rounds=None, seed=2)
    engine = resolved.engine
    assert isinstance(engine, FedPerGNNConfig) and resolved.preset == "tuned"
    assert (engine.train.dim, engine.train.seed, engine.ldp_scale, engine.train.grad_scale) == (8, 2, 0.5, 0.02)
    assert engine_config(resolved.config, seed=2, rounds=resolved.rounds) == engine  # the stored form reads back


def test_every_preset_is_offered_by_name_and_builds_a_valid_config() -> None:
    assert set(get_args(PresetName)) == set(PRESETS)
    for name in PRESETS:
        assert resolve_run(config=VerFedGNNRunConfig(), preset=name, rounds=None, seed=0).preset == name


def test_engine_md_lists_every_setting_as_the_models_describe_it() -> None:
    doc = ENGINE_DOC.read_text(encoding="utf-8")
    fix = "python -c 'from services.coordinator.run_config import update_settings_doc as u; u(\"docs/engine.md\")'"
    for name, block in settings_doc_blocks().items():
        assert f"<!-- {name} -->\n{block}\n<!-- /{name} -->" in doc, f"docs/engine.md is stale: run {fix}"
    fedpergnn = settings_doc_blocks()["settings:fedpergnn"]
    for field, info in RUN_CONFIG_MODELS["verfedgnn"].model_fields.items():
        assert f"| `{field}` |" in settings_doc_blocks()["settings:verfedgnn"] and info.description, field
        if field != "protocol":
            assert f"| `train.{field}` |" in fedpergnn, field
    for field in set(FedPerGNNRunConfig.model_fields) - {"train"}:
        assert f"| `{field}` |" in fedpergnn, field


def test_a_warm_run_keeps_the_release_architecture_and_skips_the_l2_ramp() -> None:
    previous = WarmSource("release-1", "run-1", default_run_config().config)
    warm = resolve_run(config=VerFedGNNRunConfig(), preset=None, rounds=None, seed=0, previous=previous)
    assert warm.config["reg_warmup"] == 0 and warm.config["dim"] == previous.config["dim"]
    kept = resolve_run(config=VerFedGNNRunConfig(reg_warmup=10), preset=None, rounds=None, seed=0, previous=previous)
    assert kept.config["reg_warmup"] == 10  # set by the caller: kept
    with pytest.raises(WarmStartRefused, match="layers 2 → 3"):
        resolve_run(config=VerFedGNNRunConfig(layers=3), preset=None, rounds=None, seed=0, previous=previous)
    with pytest.raises(WarmStartRefused, match="FedPerGNN runs cannot warm start"):
        resolve_run(config=FedPerGNNRunConfig(protocol="fedpergnn"), preset=None, rounds=None, seed=0, previous=previous)
