"""Validation NDCG@10 in the round's metric sums: each party ranks its own catalogue, the sums pool over
parties (masked with the rest of the finish vector), and the pooled figure is the in-process one."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from services.evaluation import ranking
from services.evaluation.overlap_experiment import ranking_valid_loss
from services.evaluation.topk import party_scores
from services.verfedgnn import party as party_module
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.party import PartyTrainer, sample_valid_users
from services.verfedgnn.reference import build_federation
from services.verfedgnn.rounds import finish_layout, finish_vector, unpack_finish
from services.verfedgnn.types import GradientUpload, MetricSums, PartyData
from tests.unit.verfedgnn.test_engine import tiny_parties

CFG = TrainConfig(dim=6, layers=2, thd=1.0, rank_weight=1.0, rank_dims=2, reg=0.05, lr=0.05, seed=3,
                  secure_aggregation=True)


def _parties(*feedback: str) -> dict[str, PartyData]:
    datas = tiny_parties(4, n_users=40, items=(30, 25))
    return {d.party_id: replace(d, feedback=f) for d, f in zip(datas, feedback)}  # type: ignore[arg-type]


def _in_process(trainer: PartyTrainer) -> tuple[float, int]:
    """(Σ NDCG@10, users) of the party's served model on its aligned validation users, by the harness's ranking."""
    d = trainer.data
    valid, train = d.aligned("valid"), d.aligned("train")
    relevant = ranking.relevant_sets(valid.users, valid.items, valid.ratings, 0.0 if d.implicit else 4.0)
    seen = ranking.seen_matrix(d.n_users, d.n_items, (train.users, train.items))
    scores = party_scores(trainer.serving_model())[:d.n_users]
    f = ranking.evaluate_scores(scores, seen=seen, relevant=relevant, train_counts=np.zeros(d.n_items), ks=(10,))
    return f["ndcg@10"] * len(relevant), len(relevant)


@pytest.mark.parametrize("feedback", [("explicit", "implicit"), ("implicit", "implicit")])
def test_pooled_validation_ndcg_is_the_parties_in_process_figure(feedback: tuple[str, str]) -> None:
    ref = build_federation(_parties(*feedback), config=CFG)  # masked rounds: the coordinator sees sums only
    for t in range(3):
        m = ref.federation.run_round(t)
        own = {p: _in_process(tr) for p, tr in ref.trainers.items()}
        for p, tr in ref.trainers.items():
            sums = tr.last_metrics["valid"]
            assert sums.ranked == own[p][1] > 0 and sums.ndcg == pytest.approx(own[p][0], rel=1e-9)
        pooled = sum(s for s, _ in own.values()) / sum(n for _, n in own.values())
        assert m.ndcg["valid"] == pytest.approx(pooled, rel=1e-9)
        if all(f == "implicit" for f in feedback):  # what the overlap benchmark's early stopping watches
            loss = ranking_valid_loss({p: tr.data for p, tr in ref.trainers.items()})
            assert loss is not None and math.isnan(m.rmse["valid"])
            assert 1.0 - loss({p: party_scores(tr.serving_model()) for p, tr in ref.trainers.items()}) == \
                pytest.approx(m.ndcg["valid"], rel=1e-9)
        else:
            assert math.isfinite(m.rmse["valid"])


def test_at_most_a_fixed_sample_of_validation_users_is_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _parties("explicit", "implicit")["p1"]
    eligible = np.unique(data.aligned("valid").users)
    monkeypatch.setattr(party_module, "VALID_RANKING_USERS", 5)
    first, again = (sample_valid_users(eligible, party_id="p1") for _ in range(2))
    assert first.size == 5 and np.array_equal(first, again) and np.all(np.diff(first) > 0)
    assert set(first.tolist()) <= set(eligible.tolist())
    assert not np.array_equal(first, sample_valid_users(eligible, party_id="p0"))  # each party draws its own
    ref = build_federation({"p0": _parties("explicit", "implicit")["p0"], "p1": data}, config=CFG)
    ref.federation.run_round(0)
    assert ref.trainers["p1"].last_metrics["valid"].ranked == 5
    assert np.array_equal(sample_valid_users(eligible, party_id="p1", limit=len(eligible)), eligible)


def test_finish_vector_carries_the_validation_ranking_sums() -> None:
    grads = {"w": np.ones((2, 3), np.float32)}
    up = GradientUpload("p0", 0, 1.5, dense=grads,
                        metrics={"train": MetricSums(1.0, 1.0, 4), "valid": MetricSums(2.0, 1.0, 3, 0.75, 2)})
    layout = finish_layout(grads)
    vec = finish_vector(up, grad_scale=1.0, layout=layout)
    _, loss, metrics = unpack_finish(vec + vec, layout)  # two parties' sums
    assert loss == 3.0 and metrics["valid"] == MetricSums(4.0, 2.0, 6, 1.5, 4)
    assert metrics["train"] == MetricSums(2.0, 2.0, 8) and metrics["test"] == MetricSums()
