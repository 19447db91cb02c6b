"""Early stopping watches the pooled validation RMSE; rounds without one (implicit parties only) never stop a run."""

from __future__ import annotations

import math

from services.coordinator.runner import RunManager
from services.coordinator.runs import RoundRecord


def _history(values: list[float]) -> list[RoundRecord]:
    return [RoundRecord(t, ["a", "b"], {}, {"valid_rmse": v}) for t, v in enumerate(values)]


def test_patience_rounds_without_a_better_validation_rmse_stop_the_run() -> None:
    assert RunManager._stalled(_history([1.0, 0.9, 0.95, 0.96, 0.97]), patience=3)
    assert not RunManager._stalled(_history([1.0, 0.9, 0.95, 0.96]), patience=3)


def test_rounds_without_a_validation_rmse_never_stop_a_run() -> None:
    assert not RunManager._stalled(_history([math.nan] * 10), patience=3)
    # a nan round among finite ones is not a "better" round either
    assert RunManager._stalled(_history([1.0, 0.9, math.nan, 0.95, 0.96]), patience=3)
