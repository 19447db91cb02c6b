"""Warm start: the row map, and trainers loading a previous run's parameters and moments mapped by row."""

from __future__ import annotations

import numpy as np
import pytest

from services.federation.warm import NEW, check_rows, row_map
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.plan import PLAN
from services.verfedgnn.types import PartyData, RatingTriples

CFG = TrainConfig(dim=4, layers=2, thd=1.0, optimizer="adam", rank_weight=1.0, rank_dims=1)


def _data(n_users: int, n_items: int, seed: int) -> PartyData:
    rng = np.random.default_rng(seed)

    def trip(n: int) -> RatingTriples:
        return RatingTriples(rng.integers(0, n_users, n).astype(np.int64), rng.integers(0, n_items, n).astype(np.int64),
                             rng.integers(1, 6, n).astype(np.float32))
    return PartyData("p0", n_users, n_items, n_items, trip(80), trip(10), trip(10))


def _trained(n_users: int, n_items: int) -> tuple[CoordinatorTrainer, PartyTrainer]:
    """A coordinator and one party after three rounds (so Adam's moments are non-zero)."""
    coord = CoordinatorTrainer(config=CFG, n_users=n_users, item_counts={"p0": n_items}, global_mean=3.0)
    party = PartyTrainer(config=CFG, data=_data(n_users, n_items, 1), seed=0, local_seed=11)
    for t in range(3):
        party.begin_round(round_index=t, public=coord.public_params())
        for k in range(CFG.layers):
            party.receive_projection_sum(layer=k, others=np.zeros_like(party.layer_projection(layer=k)))
        coord.aggregate_and_step(uploads={"p0": party.finish_round()})
    return coord, party


def test_row_map_kept_ids_point_to_their_old_row_new_ones_are_new() -> None:
    rows = row_map(["a", "b", "c", ""], ["b", "x", "c", "a", ""])
    assert rows.tolist() == [1, NEW, 2, 0, NEW]  # an erased slot (the empty tombstone) never matches
    assert check_rows(rows, n_old=4, n_new=5).tolist() == rows.tolist()
    for bad, why in (([0, 0], "twice"), ([4, NEW], "outside"), ([0], "has 1 rows")):
        with pytest.raises(ValueError, match=why):
            check_rows(np.array(bad), n_old=4, n_new=2)


def test_party_items_kept_are_copied_new_ones_keep_their_fresh_draw() -> None:
    _, old = _trained(n_users=6, n_items=5)
    state = old.state_dict()
    fresh = PartyTrainer(config=CFG, data=_data(6, 7, 2), seed=0, local_seed=12)
    before = {k: v.detach().clone() for k, v in fresh.private.named_parameters()}
    # new catalogue: old items 4, 0, 2 kept at rows 0, 2, 5; rows 1, 3, 4, 6 are items new since then
    rows = np.array([4, NEW, 0, NEW, NEW, 2, NEW])
    fresh.load_warm(state, item_rows=rows)
    kept, new = rows >= 0, rows < 0
    for name, p in fresh.private.named_parameters():
        old_p = state["private"][name].numpy()  # type: ignore[index]
        np.testing.assert_array_equal(p.detach().numpy()[kept], old_p[rows[kept]])
        np.testing.assert_array_equal(p.detach().numpy()[new], before[name].numpy()[new])
    assert not np.allclose(before["item_emb"].numpy()[kept], fresh.private.item_emb.detach().numpy()[kept])
    moments = fresh.optimizer.state_dict()["state"][0]  # item_emb's Adam moments
    old_moments = state["optimizer"]["state"][0]  # type: ignore[index]
    np.testing.assert_array_equal(moments["exp_avg"].numpy()[kept], old_moments["exp_avg"].numpy()[rows[kept]])
    assert not moments["exp_avg"].numpy()[new].any() and not moments["exp_avg_sq"].numpy()[new].any()
    assert float(moments["step"]) == 3.0


def test_coordinator_users_mapped_and_shared_parameters_copied_whole() -> None:
    old, _ = _trained(n_users=6, n_items=5)
    state = old.state_dict()
    new = CoordinatorTrainer(config=CFG, n_users=4, item_counts={"p0": 7}, global_mean=3.3)
    fresh_emb = new.public.user_emb.detach().clone()
    rows = np.array([5, NEW, 1, 3])
    new.load_warm(state, user_rows=rows)
    arrays, old_arrays = new.public_params(), state["public"]  # type: ignore[assignment]
    np.testing.assert_array_equal(arrays["user_emb"][[0, 2, 3]], old_arrays["user_emb"][[5, 1, 3]])  # type: ignore[index]
    np.testing.assert_array_equal(arrays["user_emb"][1], fresh_emb.numpy()[1])
    np.testing.assert_array_equal(arrays["user_bias"][[0, 2, 3]], old_arrays["user_bias"][[5, 1, 3]])  # type: ignore[index]
    for name in ("global_bias", "gate", "layer_weights"):
        np.testing.assert_array_equal(arrays[name], old_arrays[name])  # type: ignore[index]
    assert new.round_index == 0  # a new run counts its own rounds


def test_another_architecture_is_refused() -> None:
    _, old = _trained(n_users=6, n_items=5)
    other = PartyTrainer(config=CFG.model_copy(update={"dim": 5}), data=_data(6, 5, 2), seed=0)
    with pytest.raises(ValueError, match="architecture differs"):
        other.load_warm(old.state_dict(), item_rows=np.arange(5))
    settings = {"protocol": "verfedgnn", **CFG.model_dump(exclude={"seed", "rounds", "projection_seed"})}
    with pytest.raises(ValueError, match=r"dim 4 → 6"):
        PLAN.warm_settings(previous=settings, settings={**settings, "dim": 6}, explicit={"dim"})
    assert PLAN.warm_settings(previous=settings, settings=settings, explicit=set())["reg_warmup"] == 0
    assert PLAN.warm_settings(previous=settings, settings={**settings, "reg_warmup": 7},
                              explicit={"reg_warmup"})["reg_warmup"] == 7
