"""Early stopping on a ranking figure (`valid_loss`) uses `rank_patience`; on the validation RMSE, `patience`."""

from __future__ import annotations

import numpy as np

from services.data.synthetic import generate
from services.evaluation import overlap_experiment as ox
from services.evaluation import topk
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.types import PartyData

RANK_PATIENCE = 9
CONFIG = TrainConfig(dim=4, layers=1, activation="identity", transform=False, optimizer="adam", lr=0.01,
                     rank_weight=1.0, rank_dims=1, rounds=40, patience=3, rank_patience=RANK_PATIENCE, seed=0)


def _party() -> dict[str, PartyData]:
    share = ox.overlap_parties(generate(120, 80, 4000, seed=3), n_parties=1, seed=0, overlap=1.0, cold_share=0.0)
    return {"party0": ox.local_data(share["party0"])}


def test_a_ranking_figure_stops_after_rank_patience_rounds() -> None:
    calls: list[int] = []

    def worsening(_: dict[str, np.ndarray]) -> float:  # best at round 0, worse every round after
        calls.append(1)
        return float(len(calls))
    run = topk.train_ranked(_party(), config=CONFIG, protocol="p", valid_loss=worsening)
    assert run.result.best_round == 0 and run.result.rounds_run == 1 + RANK_PATIENCE


def test_without_rank_patience_the_ranking_figure_uses_patience() -> None:
    config = CONFIG.model_copy(update={"rank_patience": None})
    losses = iter(range(100))
    run = topk.train_ranked(_party(), config=config, protocol="p",
                            valid_loss=lambda _: float(next(losses)))
    assert run.result.rounds_run == 1 + CONFIG.patience


def test_round_ndcg_stops_on_the_rounds_own_pooled_figure_as_the_coordinator_does() -> None:
    # issue 31, item 4: the benchmark keeps the round a coordinator run keeps (its pooled validation NDCG@10)
    figures: list[float] = []
    run = topk.train_ranked(_party(), config=CONFIG, protocol="p", round_ndcg=True,
                            on_round=lambda _, m: figures.append(m.ndcg["valid"]))
    assert figures and all(0.0 <= f <= 1.0 for f in figures)
    best = max(range(len(figures)), key=lambda t: (figures[t], -t))
    assert run.result.best_round == best
    assert run.result.rounds_run == CONFIG.rounds or run.result.rounds_run == best + 1 + RANK_PATIENCE
