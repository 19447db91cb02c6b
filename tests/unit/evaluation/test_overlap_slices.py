"""benchmarks/overlap.py's data: who is aligned, cold or private at a party, and the slices of its test users."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from services.data.synthetic import generate
from services.data.types import Dataset, Ratings
from services.evaluation import overlap_experiment as ox


def _dataset() -> Dataset:
    return generate(120, 80, 4000, seed=3)  # train / valid / test


def _genres(ds: Dataset) -> dict[str, str]:
    items = np.unique(ds.train.item_ids.astype(str))
    return {str(i): f"g{k % 5}" for k, i in enumerate(items)}


def _pairs(r: Ratings | None) -> Counter[tuple[str, str]]:
    return Counter() if r is None else Counter(zip(r.user_ids.astype(str).tolist(), r.item_ids.astype(str).tolist()))


def _rows_of(r: Ratings | None, user: str) -> int:
    return 0 if r is None else int((r.user_ids.astype(str) == user).sum())


@pytest.mark.parametrize("by", ["random", "genre"])
@pytest.mark.parametrize("overlap", [1.0, 0.5])
def test_cold_users_keep_at_most_two_training_rows_here_and_everything_elsewhere(by: str, overlap: float) -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=overlap, genres=_genres(ds) if by == "genre" else None)
    full = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=overlap, genres=_genres(ds) if by == "genre" else None,
                              cold_share=0.0)  # the same split without cold users
    p0, p1 = shares["party0"], shares["party1"]
    assert p0.cold.size and p1.cold.size
    assert not set(p0.cold) & set(p1.cold), "a user is cold at one party at most"
    assert set(p0.cold) <= set(p0.aligned)
    for p, other in ((p0, p1), (p1, p0)):
        ref, ref_other = full[p.party_id].dataset, full[other.party_id].dataset
        for u in p.cold.tolist():
            kept = _rows_of(p.dataset.train, u) + _rows_of(p.dataset.valid, u)
            assert kept <= 2
            assert kept == min(2, _rows_of(ref.train, u) + _rows_of(ref.valid, u))
            assert _rows_of(p.dataset.test, u) == _rows_of(ref.test, u), "test rows stay"
            # the rest of their history stays at the other party
            for split in ("train", "valid", "test"):
                assert _rows_of(getattr(other.dataset, split), u) == _rows_of(getattr(ref_other, split), u)
        # nobody else loses a row
        warm = ~np.isin(p.dataset.train.user_ids.astype(str), p.cold)
        ref_warm = ~np.isin(ref.train.user_ids.astype(str), p.cold)
        assert _pairs(p.dataset.train.subset(warm)) == _pairs(ref.train.subset(ref_warm))
        # kept rows are the party's own rows
        assert not (_pairs(p.dataset.train) - _pairs(ref.train))


def test_overlap_assigns_private_users_to_one_party_and_aligned_users_to_all() -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=1, overlap=0.5)
    p0, p1 = shares["party0"], shares["party1"]
    assert np.array_equal(p0.aligned, p1.aligned)
    assert not set(p0.private) & set(p1.private)
    assert not set(p0.private) & set(p0.aligned)
    for p in (p0, p1):
        held = set(np.concatenate([r.user_ids.astype(str) for r in (p.dataset.train, p.dataset.valid, p.dataset.test)
                                   if r is not None]).tolist())
        assert held == set(p.private) | set(p.aligned)
    assert 0 < p0.aligned.size < 120
    # full overlap: nobody is private
    assert all(s.private.size == 0 for s in ox.overlap_parties(ds, n_parties=2, seed=1, overlap=1.0).values())


def test_implicit_keeps_ratings_at_or_above_the_threshold_as_interactions() -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=0.5, implicit=4.0, cold_share=0.0)
    kept = sum(len(r) for s in shares.values() for r in (s.dataset.train, s.dataset.valid, s.dataset.test)
               if r is not None)
    assert all(float(r.ratings.min()) == 1.0 == float(r.ratings.max()) for s in shares.values()
               for r in (s.dataset.train, s.dataset.test))
    high = sum(int((r.ratings >= 4.0).sum()) for r in (ds.train, ds.valid, ds.test) if r is not None)
    assert 0 < kept <= high


@pytest.mark.parametrize("feedback", ["explicit", "implicit"])
def test_slices_partition_the_partys_scored_test_users(feedback: str) -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=0.5, implicit=4.0 if feedback == "implicit" else None)
    for share in shares.values():
        ev = ox.party_eval(share)
        members = [u for rows in ev.slices.values() for u in rows]
        assert len(members) == len(set(members)), "slices are disjoint"
        assert set(members) == set(ev.relevant), "every scored test user is in a slice"
        assert all(ev.slices[s] for s in ox.SLICES)
        ids = {s: {str(ev.users[u]) for u in rows} for s, rows in ev.slices.items()}
        assert ids["aligned-cold"] <= set(share.cold)
        assert ids["not-aligned"] <= set(share.private)
        assert ids["aligned-warm"] <= set(share.aligned) - set(share.cold)
        # candidates: every item not in the user's train ∪ valid at this party
        assert ev.seen.sum() == len(share.dataset.train) + len(share.dataset.valid or [])


def test_users_without_a_model_row_get_the_popularity_fallback() -> None:
    ds = _dataset()
    share = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=0.5)["party0"]
    ev = ox.party_eval(share)
    model = np.random.default_rng(0).normal(size=(share.aligned.size, share.items.size))
    placed = ox.place_scores(ev, share.aligned.tolist(), model)
    rows = np.searchsorted(ev.users, share.aligned)
    assert np.array_equal(placed[rows], model)
    private = np.searchsorted(ev.users, share.private)
    assert np.array_equal(placed[private], np.tile(ev.counts.astype(np.float64), (private.size, 1)))


def test_model_rows_are_the_aligned_users_then_the_partys_private_users() -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=0.5)
    datas = ox.federated_data(shares)
    for p, share in shares.items():
        assert datas[p].n_users == share.aligned.size
        assert ox.model_user_ids(share, datas[p]) == [*share.aligned.tolist(), *share.private.tolist()]
        local = ox.local_data(share)
        assert local.n_users == share.aligned.size + share.private.size and local.n_private == 0


def test_the_central_ceiling_holds_every_partys_rows_and_scores_each_party_on_its_own_catalogue() -> None:
    ds = _dataset()
    shares = ox.overlap_parties(ds, n_parties=2, seed=0, overlap=0.5, genres=_genres(ds))
    central = ox.central_share(shares)
    for split in ("train", "valid", "test"):
        assert _pairs(getattr(central.dataset, split)) == sum(
            (_pairs(getattr(s.dataset, split)) for s in shares.values()), Counter())
    users, items = ox._users(central.dataset), central.items
    # a score that names its (user, item) pair: the block must keep each party's order of both
    scores = np.arange(users.size)[:, None] * 1000.0 + np.arange(items.size)[None, :]
    for p, s in shares.items():
        ev = ox.party_eval(s)
        block = ox.central_block(scores, central, s, ev)
        assert block.shape == (ev.users.size, s.items.size)
        assert (users[(block[:, 0] // 1000).astype(int)] == ev.users).all()
        assert (items[(block[0] % 1000).astype(int)] == s.items).all()
