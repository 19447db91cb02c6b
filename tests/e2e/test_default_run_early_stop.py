"""A run that sets almost nothing: the tuned-ranking preset, up to its cap, ended by early stopping on validation.

The preset trains the ranking objective, so the run stops on (and keeps the round of) its validation NDCG@10,
though its explicit parties report rating errors too (issue 31, item 4)."""

from __future__ import annotations

from pathlib import Path

from services.verfedgnn.presets import PRESETS
from tests.support.federation import federation

PATIENCE = 2


def test_a_default_run_stops_early_on_validation_long_before_its_cap(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        # no preset, no rounds: tuned-ranking and its cap; only the patiences are set so the test is short
        run = fed.client.create_run(min_parties=2, config={"patience": PATIENCE, "rank_patience": PATIENCE})
        assert run["rounds_total"] == PRESETS["tuned-ranking"]["rounds"] and run["config"]["rank_weight"] == 1.0
        status = fed.client.wait(run["run_id"], timeout=300, poll_s=0.2)
    assert status["state"] == "completed" and "stopped early" in status["detail"], status["detail"]
    valid = [r["metrics"]["valid_ndcg@10"] for r in status["rounds"]]
    best = valid.index(max(valid))
    assert status["rounds_done"] == best + PATIENCE + 1 < run["rounds_total"]  # stopped at the first stall
