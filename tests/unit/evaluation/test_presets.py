"""Experiment presets: every preset builds a valid config for every model; per-model adjustments apply."""

from __future__ import annotations

import pytest

from cli.experiment import build_config
from services.evaluation.runner import PRESETS, preset_values
from services.verfedgnn.config import TrainConfig


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("model", ["gcn", "gat", "ggnn", "mf"])
def test_every_preset_is_a_valid_config_for_every_model(name: str, model: str) -> None:
    cfg = TrainConfig(**preset_values(name, model))
    assert cfg.model == model
    assert cfg.use_projection and cfg.use_quantization and cfg.alpha == 1.0  # privacy on in every preset


def test_model_adjustments_and_explicit_overrides() -> None:
    assert preset_values("tuned", "gcn")["dim"] == 64
    gat = preset_values("tuned", "gat")
    assert (gat["dim"], gat["weight_decay"], gat["reg"]) == (32, 20.0, 0.05)
    assert preset_values("verfedgnn-paper", "gat")["dim"] == 6  # the paper preset is never adjusted
    assert build_config("tuned", {"model": "gat", "dim": 16, "r": None}).dim == 16  # explicit value wins
    with pytest.raises(KeyError):
        preset_values("nope", "gcn")
