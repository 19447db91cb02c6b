"""An implicit party's served model: predictions are the ranking score its top-K ranks by, labelled as such."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from services.party.serving import ServingModel
from tests.unit.party.test_serving_score import _model, _reference


def test_implicit_predictions_are_the_unclipped_ranking_score_and_say_so() -> None:
    explicit = _model(np.random.default_rng(5), n=6, m=9, d=7, ranked=True, rating_dim=4)
    implicit = replace(explicit, feedback="implicit")
    users, items = np.repeat(np.arange(6), 9), np.tile(np.arange(9), 6)
    ranking = _reference(implicit)  # s(u, v) = h_u·h_v + c_v over every coordinate
    np.testing.assert_allclose(implicit.scores(users, items), ranking[users, items], rtol=1e-5, atol=1e-5)
    assert implicit.scores(users, items).max() > 5.0 or implicit.scores(users, items).min() < 1.0  # not clipped
    rated = explicit.scores(users, items)
    assert rated.min() >= 1.0 and rated.max() <= 5.0  # an explicit model answers ratings on its scale
    assert (explicit.score_kind, implicit.score_kind) == ("rating", "ranking_score")
    np.testing.assert_allclose(implicit.cold_scores(np.arange(9)), implicit.rank_bias)  # type: ignore[arg-type]


def test_the_feedback_kind_survives_the_artifact() -> None:
    model = replace(_model(np.random.default_rng(1), n=3, m=4, d=2, ranked=True, rating_dim=0), feedback="implicit")
    back = ServingModel.from_bytes(model.to_bytes())
    assert back.feedback == "implicit" and back.score_kind == "ranking_score"
    old = {k: getattr(model, k) for k in model.__dataclass_fields__ if k != "feedback"}
    assert ServingModel(**old).score_kind == "rating"  # artifacts published before the kind existed
