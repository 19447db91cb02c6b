"""A FedPerGNN run that sets nothing stops early by the patience its plan declares (kept under `train`)."""

from __future__ import annotations

from pathlib import Path

from services.fedpergnn.config import DEFAULT_PRESET
from services.verfedgnn.presets import PRESETS
from tests.support.federation import federation


def test_a_default_fedpergnn_run_stops_early_by_its_patience(tmp_path: Path) -> None:
    patience = PRESETS[DEFAULT_PRESET]["patience"]
    with federation(tmp_path, n_parties=2) as fed:
        # no preset, no rounds, no settings: the protocol's default preset and its cap
        run = fed.client.create_run(min_parties=2, config={"protocol": "fedpergnn"})
        assert run["config"]["train"]["patience"] == patience and run["rounds_total"] == PRESETS[DEFAULT_PRESET]["rounds"]
        status = fed.client.wait(run["run_id"], timeout=600, poll_s=0.5)
    assert status["state"] == "completed" and "stopped early" in status["detail"], status["detail"]
    valid = [r["metrics"]["valid_rmse"] for r in status["rounds"]]
    best = valid.index(min(valid))
    assert status["rounds_done"] == best + patience + 1 < run["rounds_total"]  # stopped at the first stall
