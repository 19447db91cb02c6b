"""A run that sets almost nothing: the tuned-ranking preset, up to its cap, ended by early stopping on validation."""

from __future__ import annotations

from pathlib import Path

from services.verfedgnn.presets import PRESETS
from tests.support.federation import federation

PATIENCE = 2


def test_a_default_run_stops_early_on_validation_long_before_its_cap(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        # no preset, no rounds: tuned-ranking and its cap; only patience is set so the test is short
        run = fed.client.create_run(min_parties=2, config={"patience": PATIENCE})
        assert run["rounds_total"] == PRESETS["tuned-ranking"]["rounds"] and run["config"]["rank_weight"] == 1.0
        status = fed.client.wait(run["run_id"], timeout=300, poll_s=0.2)
    assert status["state"] == "completed" and "stopped early" in status["detail"], status["detail"]
    valid = [r["metrics"]["valid_rmse"] for r in status["rounds"]]
    best = valid.index(min(valid))
    assert status["rounds_done"] == best + PATIENCE + 1 < run["rounds_total"]  # stopped at the first stall
