"""One serving score: the folded mat-vec of ServingModel.user_scores, its rank_scores, the training
loss's torch score and the harness all equal models.scoring.serving_scores on random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.scoring import serving_scores
from models.vertical import PrivateItems, rank_scores
from services.evaluation.topk import party_scores
from services.party.serving import ServingModel


def _model(rng: np.random.Generator, *, n: int, m: int, d: int, ranked: bool, rating_dim: int) -> ServingModel:
    f32 = np.float32
    return ServingModel(
        run_id="r", round_index=3, user_ids=np.array([f"u{i}" for i in range(n)]),
        item_ids=np.array([f"i{j}" for j in range(m)]), h_u=rng.normal(size=(n, d)).astype(f32),
        h_v=rng.normal(size=(m, d)).astype(f32), user_bias=rng.normal(size=n).astype(f32),
        item_bias=rng.normal(size=m).astype(f32), global_bias=float(rng.uniform(1, 5)), rating_min=1.0,
        rating_max=5.0, rank_bias=rng.normal(size=m).astype(f32) if ranked else None, rating_dim=rating_dim)


def _reference(model: ServingModel) -> np.ndarray:
    """The one formula over every user and item, in float64."""
    f64 = np.float64
    return serving_scores(model.h_u.astype(f64), model.h_v.astype(f64),
                          rank_bias=None if model.rank_bias is None else model.rank_bias.astype(f64),
                          rating_dim=model.rating_dim, global_bias=model.global_bias,
                          user_bias=model.user_bias.astype(f64), item_bias=model.item_bias.astype(f64))


CASES = [(ranked, rating_dim) for ranked in (False, True) for rating_dim in (0, 5)]


@pytest.mark.parametrize(("ranked", "rating_dim"), CASES)
def test_folded_serving_path_equals_the_one_formula(ranked: bool, rating_dim: int) -> None:
    rng = np.random.default_rng(7 + rating_dim + ranked)
    model = _model(rng, n=9, m=57, d=8, ranked=ranked, rating_dim=rating_dim)
    expected = _reference(model)
    items = rng.permutation(57)[:20]
    for user in range(9):
        np.testing.assert_allclose(model.user_scores(user), expected[user], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(model.rank_scores(user, items), expected[user, items], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("ranked", "rating_dim"), CASES)
def test_torch_and_numpy_give_the_same_scores(ranked: bool, rating_dim: int) -> None:
    rng = np.random.default_rng(11 + rating_dim + ranked)
    model = _model(rng, n=6, m=31, d=8, ranked=ranked, rating_dim=rating_dim)
    t = {k: torch.from_numpy(np.asarray(getattr(model, k), np.float64))
         for k in ("h_u", "h_v", "user_bias", "item_bias")}
    got = serving_scores(t["h_u"], t["h_v"], rating_dim=model.rating_dim, global_bias=model.global_bias,
                         rank_bias=None if model.rank_bias is None else torch.from_numpy(model.rank_bias.astype(np.float64)),
                         user_bias=t["user_bias"], item_bias=t["item_bias"])
    np.testing.assert_allclose(got.numpy(), _reference(model), rtol=1e-12)


def test_training_ranks_by_the_served_score() -> None:
    rng = np.random.default_rng(3)
    model = _model(rng, n=5, m=23, d=8, ranked=True, rating_dim=4)
    private = PrivateItems(n_items=23, dim=8, rank_bias=True)
    with torch.no_grad():
        private.rank_bias.copy_(torch.from_numpy(model.rank_bias))  # type: ignore[union-attr]
    got = rank_scores(private, torch.from_numpy(model.h_u), torch.from_numpy(model.h_v))
    np.testing.assert_allclose(got.detach().numpy(), _reference(model), rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="ranking bias"):
        rank_scores(PrivateItems(n_items=23, dim=8), torch.from_numpy(model.h_u), torch.from_numpy(model.h_v))


@pytest.mark.parametrize(("ranked", "rating_dim"), CASES)
def test_the_harness_scores_what_serving_serves(ranked: bool, rating_dim: int) -> None:
    rng = np.random.default_rng(5 + rating_dim + ranked)
    model = _model(rng, n=7, m=19, d=8, ranked=ranked, rating_dim=rating_dim)
    arrays = {"user_repr": model.h_u, "item_repr": model.h_v, "user_bias": model.user_bias,
              "item_bias": model.item_bias, "global_bias": np.array([model.global_bias]),
              "rating_dim": np.array(rating_dim)}
    if model.rank_bias is not None:
        arrays["rank_bias"] = model.rank_bias
    served = np.stack([model.user_scores(u) for u in range(7)])
    np.testing.assert_allclose(party_scores(arrays), served, rtol=1e-5, atol=1e-4)  # type: ignore[arg-type]


def test_rating_only_score_needs_the_biases() -> None:
    with pytest.raises(ValueError, match="user_bias"):
        serving_scores(np.ones((2, 3)), np.ones((4, 3)), rank_bias=None)
