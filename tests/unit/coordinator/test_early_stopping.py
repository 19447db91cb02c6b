"""Early stopping watches the pooled validation RMSE; when no party reports rating errors (every party implicit)
it watches the pooled validation NDCG@10 (higher is better); rounds with neither never stop a run."""

from __future__ import annotations

import math

from services.coordinator.runner import RunManager, watched_figure, watched_loss
from services.coordinator.runs import RoundRecord


def _history(values: list[float], key: str = "valid_rmse") -> list[RoundRecord]:
    return [RoundRecord(t, ["a", "b"], {}, {key: v}) for t, v in enumerate(values)]


def test_patience_rounds_without_a_better_validation_rmse_stop_the_run() -> None:
    assert RunManager._stalled(_history([1.0, 0.9, 0.95, 0.96, 0.97]), patience=3)
    assert not RunManager._stalled(_history([1.0, 0.9, 0.95, 0.96]), patience=3)


def test_rounds_without_a_validation_figure_never_stop_a_run() -> None:
    assert not RunManager._stalled(_history([math.nan] * 10), patience=3)
    assert not RunManager._stalled([RoundRecord(t, ["a"], {}, {"loss": 1.0}) for t in range(10)], patience=3)
    # a nan round among finite ones is not a "better" round either
    assert RunManager._stalled(_history([1.0, 0.9, math.nan, 0.95, 0.96]), patience=3)


def test_without_rating_errors_the_validation_ndcg_decides_higher_is_better() -> None:
    ndcg = _history([0.10, 0.20, 0.19, 0.18, 0.17], key="valid_ndcg@10")
    assert watched_figure([r.metrics for r in ndcg]) == "valid_ndcg@10"
    assert RunManager._stalled(ndcg, patience=3) and not RunManager._stalled(ndcg[:4], patience=3)
    assert not RunManager._stalled(_history([0.10, 0.20, 0.21, 0.22, 0.23], key="valid_ndcg@10"), patience=3)
    assert RunManager._best(ndcg) == (1, -0.20)  # the kept round: the best NDCG


def test_rating_errors_decide_when_any_party_reports_them() -> None:
    # a mixed federation reports both: RMSE decides, exactly as before NDCG was reported
    both = [RoundRecord(t, ["a", "b"], {}, {"valid_rmse": r, "valid_ndcg@10": n})
            for t, (r, n) in enumerate([(1.0, 0.1), (0.9, 0.1), (0.95, 0.3), (0.96, 0.4), (0.97, 0.5)])]
    assert watched_figure([r.metrics for r in both]) == "valid_rmse"
    assert RunManager._stalled(both, patience=3) and RunManager._best(both) == (1, 0.9)
    assert watched_loss({"valid_rmse": 0.9, "valid_ndcg@10": 0.3}, "valid_rmse") == 0.9
    assert watched_loss({"valid_ndcg@10": 0.3}, "valid_ndcg@10") == -0.3
    assert watched_loss({"valid_ndcg@10": 0.3}, None) is None


def test_the_ranking_figure_stops_after_rank_patience_and_the_rmse_after_patience() -> None:
    ndcg = _history([0.10, 0.20, 0.19, 0.18, 0.17, 0.16], key="valid_ndcg@10")
    assert not RunManager._stalled(ndcg, patience=3, rank_patience=5)
    longer = ndcg + [RoundRecord(6, ["a", "b"], {}, {"valid_ndcg@10": 0.15})]
    assert RunManager._stalled(longer, patience=3, rank_patience=5)
    rmse = _history([1.0, 0.9, 0.95, 0.96, 0.97])
    assert RunManager._stalled(rmse, patience=3, rank_patience=50), "rank_patience never delays an RMSE stop"


def test_a_ranking_run_keeps_and_stops_by_ndcg_whatever_the_feedback_kind() -> None:
    # issue 31, item 4: a run that serves top-K lists (rank_weight > 0) keeps its best NDCG@10 round even where
    # the parties report rating errors; a rating-only run keeps its best RMSE round
    both = [RoundRecord(t, ["a", "b"], {}, {"valid_rmse": r, "valid_ndcg@10": n})
            for t, (r, n) in enumerate([(1.0, 0.1), (0.9, 0.1), (0.95, 0.3), (0.96, 0.4), (0.97, 0.35)])]
    assert watched_figure([r.metrics for r in both], ranks=True) == "valid_ndcg@10"
    assert RunManager._best(both, ranks=True) == (3, -0.4) and RunManager._best(both) == (1, 0.9)
    assert not RunManager._stalled(both, patience=3, ranks=True) and RunManager._stalled(both, patience=3)
    # a ranking run whose parties report no NDCG (none ranked) falls back to the RMSE
    rmse_only = _history([1.0, 0.9, 0.95, 0.96, 0.97])
    assert watched_figure([r.metrics for r in rmse_only], ranks=True) == "valid_rmse"


def test_the_progress_line_names_the_best_round_and_what_is_left() -> None:
    from services.coordinator.runner import progress

    line = progress(t=9, total=1000, best_metrics={"valid_ndcg@10": 0.25, "valid_rmse": 0.93}, best=(6, -0.25),
                    watched="valid_ndcg@10", patience=5, seconds=[2.0] * 10, minutes_left=None)
    assert line.startswith("round 10/1000 done; best validation round 6 (NDCG@10 0.2500, RMSE 0.9300; kept by NDCG@10)")
    # 5 rounds past round 6 end the run after round 12: 2 more rounds of 2 s
    assert "at most about 0.1 min left (stops after round 12 unless validation improves)" in line
    bounded = progress(t=9, total=1000, best_metrics={}, best=None, watched=None, patience=5, seconds=[60.0],
                       minutes_left=3.0)
    assert bounded == "round 10/1000 done; at most about 3.0 min left"
