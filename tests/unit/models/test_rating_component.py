"""The rating component: I-AutoRec's factorized form, the never-worse per-slice blend, the stored tree."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models import rating_blend
from models.autorec import AutoRecConfig, ItemAutoRec, fit_item_autorec, item_matrix
from services.party.rating_component import served_valid_sums, with_component
from services.verfedgnn.plan import PLAN
from services.verfedgnn.rating_component import ComponentConfig, cut_component_rows, fit_component
from services.party.serving import ServingModel
from services.verfedgnn.types import PartyData, RatingTriples


def _low_rank(n_users: int, n_items: int, n: int, seed: int) -> RatingTriples:
    rng = np.random.default_rng(seed)
    pu, qi = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    flat = rng.choice(n_users * n_items, size=n, replace=False)
    users, items = flat // n_items, flat % n_items
    ratings = np.clip(np.rint(3 + (pu[users] * qi[items]).sum(1) + rng.normal(0, 0.3, n)), 1, 5)
    return RatingTriples(users.astype(np.int64), items.astype(np.int64), ratings.astype(np.float32))


def _party(seed: int = 0) -> PartyData:
    t = _low_rank(60, 40, 1500, seed)
    idx = np.random.default_rng(seed + 1).permutation(len(t))
    part = [np.isin(np.arange(len(t)), idx[a:b]) for a, b in ((0, 1100), (1100, 1300), (1300, 1500))]
    return PartyData("p0", 55, 40, 80, t.subset(part[0]), t.subset(part[1]), t.subset(part[2]),
                     private_user_ids=[f"own-{k}" for k in range(5)])


def _model(data: PartyData, seed: int = 0) -> ServingModel:
    rng = np.random.default_rng(seed)
    n, m = data.n_users + data.n_private, data.n_items
    return ServingModel(run_id="r", round_index=0, user_ids=np.array([f"u{k}" for k in range(n)]),
                        item_ids=np.array([f"i{k}" for k in range(m)]),
                        h_u=rng.normal(0, 0.3, (n, 4)).astype(np.float32), h_v=rng.normal(0, 0.3, (m, 4)).astype(np.float32),
                        user_bias=np.zeros(n, np.float32), item_bias=np.zeros(m, np.float32), global_bias=3.0,
                        rating_min=1.0, rating_max=5.0)


def test_autorec_factors_are_the_network() -> None:
    t = _low_rank(30, 20, 300, 3)
    cfg = AutoRecConfig(hidden=8, epochs=5)
    f = fit_item_autorec(users=t.users, items=t.items, ratings=t.ratings, n_users=30, n_items=20, config=cfg, seed=1)
    gen = torch.Generator().manual_seed(1)
    assert f.item_code.shape == (20, 8) and f.user_weight.shape == (30, 8) and f.user_offset.shape == (30,)
    net = ItemAutoRec(n_users=30, hidden=8, generator=gen)
    net.decoder.weight.data = torch.as_tensor(f.user_weight)
    net.decoder.bias.data = torch.as_tensor(f.user_offset)
    # decoding the stored codes is the factorized prediction
    out = net.decoder(torch.as_tensor(f.item_code)).detach().numpy()  # (items, users)
    users, items = np.arange(30).repeat(20), np.tile(np.arange(20), 30)
    np.testing.assert_allclose(f.predict(users, items), out[items, users], atol=1e-5)
    # the same seed gives the same model (the fit never reads torch's global generator)
    torch.manual_seed(123)
    again = fit_item_autorec(users=t.users, items=t.items, ratings=t.ratings, n_users=30, n_items=20, config=cfg, seed=1)
    np.testing.assert_array_equal(again.item_code, f.item_code)
    x, mask = item_matrix(users=t.users, items=t.items, ratings=t.ratings, n_users=30, n_items=20)
    assert float(mask.sum()) == len(t) and float(x.sum()) == pytest.approx(float(t.ratings.sum()))


@pytest.mark.parametrize("shrink", [0.0, 10.0, 1e9])
def test_blend_is_never_worse_than_a_part_on_its_fit(shrink: float) -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(1, 6, 2000).astype(np.float64)
    a, b = y + rng.normal(0, 0.9, 2000), y + rng.normal(0.3, 1.1, 2000)
    slices = rng.integers(0, rating_blend.n_slices(), 2000)
    x = rating_blend.design([np.clip(a, 1, 5), np.clip(b, 1, 5)])
    w = rating_blend.fit_blend(x=x, y=y, slices=slices, n_slice=rating_blend.n_slices(), shrink=shrink)
    combined = rating_blend.combine(x=x, slices=slices, weights=w, low=1, high=5)
    best_part = min(rating_blend.rmse(np.clip(a, 1, 5), y), rating_blend.rmse(np.clip(b, 1, 5), y))
    assert rating_blend.rmse(combined, y) < best_part - 0.02
    if shrink == 1e9:  # every slice pulled to the global least-squares fit
        np.testing.assert_allclose(w, np.tile(np.linalg.lstsq(x, y, rcond=None)[0], (len(w), 1)), atol=1e-5)


def test_slices_separate_private_users_and_history_lengths() -> None:
    group = rating_blend.user_group(np.array([0, 5, 50, 500, 5]), np.array([False, False, False, False, True]))
    assert group.tolist() == [0, 1, 3, 4, 6]
    assert rating_blend.bucket(np.array([0, 1, 9, 10, 29, 30, 99, 100]), rating_blend.ITEM_EDGES).tolist() == [
        0, 1, 1, 2, 2, 3, 3, 4]
    assert int(rating_blend.slice_of(group, np.full(5, 4)).max()) < rating_blend.n_slices()


def test_component_is_fitted_stored_served_and_cut() -> None:
    data = _party()
    model = _model(data)
    cfg = ComponentConfig(autorec=AutoRecConfig(hidden=16, epochs=30, lr=3e-3, l2=10.0, batch=8))
    fitted = fit_component(data=data, base=model.scores, config=cfg, seed=0)
    assert fitted is not None
    served = replace(model, rating_component=fitted.tree)
    assert fitted.valid_rmse["combined"] <= min(fitted.valid_rmse["federated"], fitted.valid_rmse["component"])
    again = ServingModel.from_bytes(served.to_bytes())
    te = data.test
    base = model.scores(te.users, te.items)
    expected = fitted.predict(users=te.users, items=te.items, base=base, low=1.0, high=5.0)
    np.testing.assert_allclose(again.scores(te.users, te.items), expected, atol=1e-9)
    np.testing.assert_array_equal(again.without_component().scores(te.users, te.items), base)
    assert not np.allclose(expected, base)
    sse, count = served_valid_sums(again, plan=PLAN, data=data) or (0.0, 0)
    assert count == len(data.valid) and np.sqrt(sse / count) == pytest.approx(fitted.valid_rmse["combined"])
    # erasure: the user's rows go, every other user's answers stay
    keep = np.ones(len(model.user_ids), bool)
    keep[7] = False
    cut = cut_component_rows(served.rating_component, keep)  # type: ignore[arg-type]
    assert len(cut["user_weight"]) == len(keep) - 1 and cut["item_code"] is served.rating_component["item_code"]
    # a second publish of a model that has its component keeps it; an implicit model gets none
    assert with_component(served, plan=PLAN, data=data, seed=0) is served


def test_no_component_without_validation_ratings_or_when_disabled() -> None:
    data = _party()
    model = _model(data)
    empty = PartyData("p0", data.n_users, data.n_items, data.n_items, data.train,
                      private_user_ids=data.private_user_ids)
    assert fit_component(data=empty, base=model.scores, config=ComponentConfig(), seed=0) is None
    assert fit_component(data=data, base=model.scores, config=ComponentConfig(enabled=False), seed=0) is None
    assert with_component(model, plan=PLAN, data=object(), seed=0) is model
