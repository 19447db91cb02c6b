"""The serving hot path (precomputed lists, folded affine map, float32) against the blend as served before it.

`reference_recommend` and `reference_predict` are serving's top-K and implicit predictions as they were
written before services.party.hot_path (per request: the EASE row, two z-scores and the calibration in
float64, `models.blend.LocalRanking.served_user`); every user of the fixture gets the same list from both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from models import ease as ease_model
from models.blend import Blend, LocalRanking
from services.party import hot_path
from services.party.serving import ServingModel, Snapshot, predict, recommend, top_k

N_USERS, N_MODEL, N_ITEMS, DIM = 80, 60, 400, 6
TIE = 4e-7  # relative: about 3 float32 ulps


def reference_recommend(snap: Snapshot, user_id: str, k: int) -> dict[str, Any]:
    """Serving's top-K before the hot path (the blend computed per request in float64)."""
    row = snap.user_rows[user_id]
    rated = snap.rated_idx[snap.rated_ptr[row]:snap.rated_ptr[row + 1]]
    model_row = int(snap.model_row[row])
    local = snap.model.local_ranking
    if local is not None and (model_row >= 0 or len(rated)):
        fed = snap.model.user_scores(model_row) if model_row >= 0 else None
        scores = local.served_user(fed, rated, model_row >= 0 and snap.model.is_aligned(model_row))
        top = top_k(scores, min(k, len(scores) - len(rated)))
        values, fallback = scores[top].astype(np.float64), None if model_row >= 0 else "local"
    elif model_row >= 0:
        scores = snap.model.user_scores(model_row)
        scores[rated] = -np.inf
        top = top_k(scores, min(k, len(scores) - len(rated)))
        values, fallback = scores[top].astype(np.float64), None
    else:
        head = snap.popular[:k + len(rated)]
        top = head[~np.isin(head, rated)][:k]
        values, fallback = snap.counts[top].astype(np.float64), "popularity"
    return {"items": [str(i) for i in snap.model.item_ids[top]], "scores": values.tolist(), "fallback": fallback}


def reference_predict(snap: Snapshot, user_id: str, items: np.ndarray) -> np.ndarray:
    """An implicit party's prediction before the hot path: the served blend's log-odds, unmasked."""
    row = snap.user_rows[user_id]
    rated = snap.rated_idx[snap.rated_ptr[row]:snap.rated_ptr[row + 1]]
    model_row = int(snap.model_row[row])
    local = snap.model.local_ranking
    assert local is not None
    fed = snap.model.user_scores(model_row) if model_row >= 0 else None
    aligned = model_row >= 0 and snap.model.is_aligned(model_row)
    return local.served_user(fed, rated, aligned, mask=False)[items]


def _fixture(seed: int, *, blend: bool, ranked: bool) -> Snapshot:
    """Users 0-59 have model rows (every third not aligned), 60-74 a history only, 75-79 nothing; some
    histories of 1-2 items (the cold cells)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 25, N_USERS)
    sizes[::7] = rng.integers(1, 3, len(sizes[::7]))
    sizes[75:] = 0
    pop = 1.0 / np.arange(1, N_ITEMS + 1) ** 0.7
    hist = [np.sort(rng.choice(N_ITEMS, s, replace=False, p=pop / pop.sum())) for s in sizes]
    users = np.repeat(np.arange(N_USERS), sizes)
    items = np.concatenate(hist)
    local = None
    if blend:
        ease = ease_model.fit(users, items, N_ITEMS, 50.0)
        local = LocalRanking(ease, Blend(np.array([0.3, 0.7, 0.5, 1.0]), np.array([1.3, 0.8, 1.1, 0.9, 0.7]),
                                         np.array([-4.0, -3.5, -4.2, -3.9, -4.4]))).to_tree()
    model = ServingModel(
        run_id="r", round_index=1, user_ids=np.array([f"u{u}" for u in range(N_MODEL)]),
        item_ids=np.array([f"i{i}" for i in range(N_ITEMS)]),
        h_u=rng.normal(0, 0.5, (N_MODEL, DIM)).astype(np.float32),
        h_v=rng.normal(0, 0.5, (N_ITEMS, DIM)).astype(np.float32),
        user_bias=rng.normal(0, 0.2, N_MODEL).astype(np.float32),
        item_bias=rng.normal(0, 0.2, N_ITEMS).astype(np.float32), global_bias=3.0, rating_min=1.0,
        rating_max=5.0, rank_bias=rng.normal(0, 0.3, N_ITEMS).astype(np.float32) if ranked else None,
        rating_dim=0 if ranked else 4, aligned=np.arange(N_MODEL) % 3 != 2, local=local)
    counts = np.bincount(items, minlength=N_ITEMS)
    return Snapshot(version=1, token="t", release_id=None, model=model,
                    item_index={f"i{i}": i for i in range(N_ITEMS)},
                    user_rows={f"u{u}": u for u in range(N_USERS)},
                    model_row=np.where(np.arange(N_USERS) < N_MODEL, np.arange(N_USERS), -1),
                    rated_ptr=np.concatenate([[0], np.cumsum(sizes)]), rated_idx=items,
                    popular=np.argsort(-counts, kind="stable"), counts=counts)


def assert_same_list(got: dict[str, Any], want: dict[str, Any], full: dict[str, float]) -> None:
    """`got` is the reference's list: each position holds the reference's item or one the reference scores
    equal to it within float32 resolution (float32 scores cannot order what float64 separates by 1e-8)."""
    ids = [it["item_id"] for it in got["items"]]
    assert len(ids) == len(want["items"]) and len(set(ids)) == len(ids) and got["fallback"] == want["fallback"]
    for mine, theirs, score in zip(ids, want["items"], want["scores"]):
        assert mine == theirs or abs(full[mine] - score) <= TIE * max(1.0, abs(score)), (mine, theirs)
    np.testing.assert_allclose([it["score"] for it in got["items"]], want["scores"], rtol=1e-5, atol=1e-5)


def _with_hot(snap: Snapshot) -> Snapshot:
    hot = hot_path.build(snap.model.scorer, snap.model_row, snap.rated_ptr, snap.rated_idx)
    assert hot is not None
    return replace(snap, hot=hot)


@pytest.mark.parametrize(("blend", "ranked"), [(True, True), (True, False), (False, True), (False, False)])
def test_hot_path_serves_the_reference_lists_to_every_user(blend: bool, ranked: bool) -> None:
    for seed in range(3):
        cold = _fixture(seed, blend=blend, ranked=ranked)
        for snap in (cold, _with_hot(cold)):  # before the lists are built, from them, and past their length
            for u in range(N_USERS):
                every = reference_recommend(snap, f"u{u}", N_ITEMS)
                full = dict(zip(every["items"], every["scores"]))
                for k in (1, 10, hot_path.PRECOMPUTED_K, 250, N_ITEMS):
                    want = reference_recommend(snap, f"u{u}", k)
                    got = recommend(snapshot=snap, user_id=f"u{u}", k=k)
                    if k <= 10:  # what apps and the coordinator ask: no float32 tie this high in the fixture
                        assert [it["item_id"] for it in got["items"]] == want["items"], (seed, u, k)
                    assert_same_list(got, want, full)


def test_the_folded_map_is_the_blend() -> None:
    snap = _with_hot(_fixture(7, blend=True, ranked=True))
    implicit = replace(snap, model=replace(snap.model, feedback="implicit"))
    for u in range(75):  # users served by the blend or EASE alone
        items = np.arange(0, N_ITEMS, 3)
        got = predict(snapshot=implicit, pairs=[(f"u{u}", f"i{i}") for i in items])
        np.testing.assert_allclose([p["rating"] for p in got], reference_predict(implicit, f"u{u}", items),
                                   rtol=1e-5, atol=1e-5)
        assert {p["fallback"] for p in got} == {None if u < N_MODEL else "local"}


def test_an_erased_user_keeps_no_precomputed_list() -> None:
    snap = _with_hot(_fixture(1, blend=True, ranked=False)).without_user("u3")
    assert snap.hot is not None and "u3" not in snap.user_rows
    assert recommend(snapshot=snap, user_id="u4", k=10)["items"]


@pytest.mark.parametrize("blend", [True, False])
def test_one_release_serves_the_same_scores_before_and_after_its_lists_are_built(blend: bool) -> None:
    """A row scored alone (a request before the lists exist, or past their length) gets bit for bit the
    scores its chunk of the precomputed lists got: an app, and a rollback, see one answer per release."""
    for seed in range(3):
        cold = _fixture(seed, blend=blend, ranked=True)
        hot = _with_hot(cold)
        for u in range(N_USERS):
            before = recommend(snapshot=cold, user_id=f"u{u}", k=10)
            assert recommend(snapshot=hot, user_id=f"u{u}", k=10) == before, (seed, u)
