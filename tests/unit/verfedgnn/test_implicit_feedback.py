"""Implicit feedback at a party: ranking objective only, no rating term, no RMSE sums, no share of μ."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import numpy as np
import pytest

from services.errors import PolicyRefused, ProtocolError
from services.evaluation.harness import Federation, alone, merge_parties
from services.federation.plan import RatingTable
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.plan import PLAN, load_party_data
from services.verfedgnn.types import GradientUpload, PartyData, RatingTriples, rmse_mae
from tests.unit.verfedgnn.test_engine import federation, tiny_parties

CFG = TrainConfig(dim=4, layers=2, thd=4.0, rank_weight=1.0, rank_dims=1, reg=0.1, reg_bias=0.1,
                  use_quantization=False, use_projection=False)


def _scaled(data: PartyData, values: np.ndarray) -> PartyData:
    t = data.train
    return replace(data, train=RatingTriples(t.users, t.items, values.astype(np.float32)))


def _upload(data: PartyData, config: TrainConfig = CFG) -> GradientUpload:
    """One round of one party against zero aggregates of the others: its dense gradients and metric sums."""
    coord = CoordinatorTrainer(config=config, n_users=data.n_users, item_counts={data.party_id: data.n_items},
                               global_mean=3.0)
    trainer = PartyTrainer(config=config, data=data, seed=0)
    trainer.begin_round(round_index=0, public=coord.public_params())
    for k in range(config.layers):
        y = trainer.layer_projection(layer=k)
        trainer.receive_projection_sum(layer=k, others=np.zeros_like(y))
    return trainer.finish_round()


def _implicit(seed: int = 0) -> PartyData:
    return replace(tiny_parties(seed)[1], feedback="implicit")


def test_implicit_gradients_do_not_depend_on_the_values_when_unweighted() -> None:
    data = _implicit()
    ones, sevens = (_upload(_scaled(data, np.full(len(data.train), c))) for c in (1.0, 7.5))
    assert ones.dense and set(ones.dense) == set(sevens.dense)
    for name, g in ones.dense.items():
        np.testing.assert_allclose(g, sevens.dense[name], rtol=1e-5, atol=1e-7, err_msg=name)
    assert ones.loss == pytest.approx(sevens.loss, rel=1e-5)
    assert any(float(np.abs(g).sum()) > 0 for g in ones.dense.values())  # the ranking loss does train
    # the same data as explicit ratings: scaling them changes the gradients (the rating term is there)
    explicit = replace(data, feedback="explicit")
    a, b = (_upload(_scaled(explicit, np.full(len(data.train), c))) for c in (1.0, 5.0))
    assert any(not np.allclose(a.dense[k], b.dense[k]) for k in a.dense)


def test_weights_scale_the_ranking_loss_and_only_their_ratio_counts() -> None:
    data = _implicit()
    w = np.random.default_rng(3).integers(1, 20, len(data.train)).astype(np.float32)
    weighted, doubled, flat = (_upload(_scaled(data, v)) for v in (w, 2 * w, np.ones_like(w)))
    for name, g in weighted.dense.items():
        np.testing.assert_allclose(g, doubled.dense[name], rtol=1e-5, atol=1e-7, err_msg=name)
    assert any(not np.allclose(weighted.dense[k], flat.dense[k]) for k in flat.dense)


def test_implicit_party_reports_no_rating_errors_and_pooled_rmse_is_the_explicit_partys() -> None:
    explicit, implicit = tiny_parties()
    parties = [explicit, replace(implicit, feedback="implicit")]
    assert _upload(parties[1]).metrics["test"].count == 0
    fed = federation(CFG, parties)
    m = fed.run_round(0)
    own = {p: rmse_mae([fed.parties[p].last_metrics["test"]])[0] for p in ("p0", "p1")}
    assert math.isfinite(m.rmse["test"]) and m.rmse["test"] == pytest.approx(own["p0"])
    assert math.isnan(own["p1"]) and math.isfinite(m.loss)


def test_implicit_party_announces_nothing_for_the_global_mean() -> None:
    explicit, implicit = tiny_parties()
    assert PLAN.announce(explicit) == (len(explicit.train), pytest.approx(float(explicit.train.ratings.sum())))
    assert PLAN.announce(replace(implicit, feedback="implicit")) == (0, 0.0)


def test_every_interaction_is_a_graph_edge_whatever_its_weight() -> None:
    data = _implicit()
    low = _scaled(data, np.full(len(data.train), 0.5))  # below thd = 4: an explicit party would drop them
    assert PartyTrainer(config=CFG, data=low, seed=0).graph.n_edges > 0
    assert PartyTrainer(config=CFG, data=replace(low, feedback="explicit"), seed=0).graph.n_edges == 0


def test_implicit_party_refuses_a_run_without_the_ranking_objective() -> None:
    rating_only = CFG.model_copy(update={"rank_weight": 0.0, "rank_dims": 0})
    with pytest.raises(ProtocolError, match="rank_weight"):
        PartyTrainer(config=rating_only, data=_implicit(), seed=0)
    table = RatingTable(np.array(["u1", "u2"], dtype=object), np.array(["a", "b"], dtype=object),
                        np.ones(2, np.float32), np.zeros(2, np.int8))

    def load(config: TrainConfig, feedback: Literal["explicit", "implicit"]) -> PartyData:
        return load_party_data(config=config, party_id="p", table=table, user_order=["u1", "u2"],
                               item_order=["a", "b"], total_items=2, rating_range=(1.0, 5.0), local_seed=1,
                               feedback=feedback)

    with pytest.raises(PolicyRefused, match="rank_weight") as err:
        load(rating_only, "implicit")
    assert err.value.extra["field"] == "config.rank_weight"
    assert load(rating_only, "explicit").feedback == "explicit"
    assert load(CFG, "implicit").implicit


def test_the_in_process_harness_keeps_the_feedback_kind() -> None:
    explicit, implicit = tiny_parties()
    implicit = replace(implicit, feedback="implicit")
    assert alone(implicit).implicit and not alone(explicit).implicit
    both = Federation([replace(explicit, feedback="implicit"), implicit], explicit.n_users, 0.0)
    assert merge_parties(both).implicit
    with pytest.raises(ValueError, match="cannot be merged"):
        merge_parties(Federation([explicit, implicit], explicit.n_users, 3.0))
