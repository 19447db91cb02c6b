"""The in-memory serving path against a plain oracle: snapshot arrays, top-K, predictions, refresh, erasure.

Runs on SQLite and PostgreSQL (the storage fixtures); the oracle scores every unrated item with
ServingModel.scores and sorts, the way serving worked before the snapshot.
"""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from services.errors import Conflict, NotFound
from services.party import erasure
from services.party.ingest import ingest_stream
from services.party.serving import ServingModel, predict, publish, recommend, top_k
from services.party.serving_cache import ModelCache, build_snapshot

pytestmark = pytest.mark.usefixtures("party_url")
N_USERS, N_ITEMS, DIM = 40, 300, 5


def _ingest(session: Session, rows: list[tuple[str, str, float]]) -> None:
    body = "user_id,item_id,rating\n" + "".join(f"{u},{i},{r}\n" for u, i, r in rows)
    ingest_stream(session=session, body=io.BytesIO(body.encode()), kind="interactions", fmt="csv",
                  rating_min=1.0, rating_max=5.0)


def _federation(sessions: sessionmaker[Session], seed: int = 0) -> tuple[ServingModel, set[tuple[str, str]]]:
    """Random ratings; a model over the first 30 users and every item but the last 20 (added later)."""
    rng = np.random.default_rng(seed)
    rated = {(f"u{u}", f"i{i}") for u in range(N_USERS) for i in rng.choice(N_ITEMS, 12, replace=False)}
    with sessions() as session:
        _ingest(session, [(u, i, float(rng.integers(1, 6))) for u, i in sorted(rated)])
        model = ServingModel(run_id="r", round_index=3, user_ids=np.array([f"u{u}" for u in range(30)]),
                             item_ids=np.array([f"i{i}" for i in range(N_ITEMS - 20)]),
                             h_u=rng.normal(0, 0.5, (30, DIM)).astype(np.float32),
                             h_v=rng.normal(0, 0.5, (N_ITEMS - 20, DIM)).astype(np.float32),
                             user_bias=rng.normal(0, 0.2, 30).astype(np.float32),
                             item_bias=rng.normal(0, 0.2, N_ITEMS - 20).astype(np.float32),
                             global_bias=3.0, rating_min=1.0, rating_max=5.0)
        publish(session=session, model=model)
    return model, rated


def _oracle(model: ServingModel, rated: set[tuple[str, str]], user: str, k: int) -> list[str]:
    u = list(model.user_ids).index(user)
    items = [j for j, i in enumerate(model.item_ids) if (user, str(i)) not in rated]
    raw = (model.global_bias + model.user_bias[u] + model.item_bias[items] + model.h_v[items] @ model.h_u[u])
    order = np.lexsort((np.array(items), -raw))[:k]
    return [str(model.item_ids[items[j]]) for j in order]


def test_snapshot_top_k_matches_the_oracle(sessions: sessionmaker[Session]) -> None:
    model, rated = _federation(sessions)
    with sessions() as session:
        snap = build_snapshot(session=session)
    assert snap is not None and snap.version == 1 and len(snap.user_rows) == N_USERS
    for user in (f"u{u}" for u in range(30)):
        got = recommend(snapshot=snap, user_id=user, k=15)
        assert got["fallback"] is None
        assert [it["item_id"] for it in got["items"]] == _oracle(model, rated, user, 15)
        scores = [it["score"] for it in got["items"]]
        assert scores == sorted(scores, reverse=True)
    # k beyond the candidates: every unrated model item, none the user rated.
    everything = recommend(snapshot=snap, user_id="u0", k=1000)["items"]
    unrated = [i for i in model.item_ids.tolist() if ("u0", i) not in rated]
    assert sorted(it["item_id"] for it in everything) == sorted(unrated)


def test_cold_users_get_popular_unrated_items(sessions: sessionmaker[Session]) -> None:
    model, rated = _federation(sessions)
    with sessions() as session:
        snap = build_snapshot(session=session)
    assert snap is not None
    counts = {str(i): sum(1 for _, j in rated if j == str(i)) for i in model.item_ids}
    got = recommend(snapshot=snap, user_id="u35", k=8)
    assert got["fallback"] == "popularity"
    ids = [it["item_id"] for it in got["items"]]
    assert not any(("u35", i) in rated for i in ids)
    expected = sorted((i for i in counts if ("u35", i) not in rated), key=lambda i: (-counts[i], int(i[1:])))[:8]
    assert ids == expected and [it["score"] for it in got["items"]] == [float(counts[i]) for i in expected]


def test_predictions_are_vectorized_scores(sessions: sessionmaker[Session]) -> None:
    model, _ = _federation(sessions)
    with sessions() as session:
        snap = build_snapshot(session=session)
    assert snap is not None
    pairs = [(f"u{u}", f"i{i}") for u, i in zip(range(0, 40, 3), range(0, 280, 21))]
    got = predict(snapshot=snap, pairs=pairs)
    for (user, item), row in zip(pairs, got):
        j = int(item[1:])
        if int(user[1:]) < 30:
            expected = float(model.scores(np.array([int(user[1:])]), np.array([j]))[0])
            assert row["fallback"] is None
        else:
            expected = float(np.clip(model.global_bias + model.item_bias[j], 1.0, 5.0))
            assert row["fallback"] == "popularity"
        assert row["rating"] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(NotFound) as bad_item:
        predict(snapshot=snap, pairs=[("u1", "i1"), ("u1", "i295")])  # i295 is not in the model
    assert bad_item.value.extra == {"row": 1, "field": "item_id"}
    with pytest.raises(NotFound) as bad_user:
        predict(snapshot=snap, pairs=[("ghost", "i1")])
    assert bad_user.value.extra == {"row": 0, "field": "user_id"}


def test_top_k_is_exact_including_ties_and_excluded_items() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 5000))
        scores = rng.normal(size=n).astype(np.float32)
        if trial % 2:
            scores = np.round(scores, 1)  # many exact ties
        excluded = rng.choice(n, int(rng.integers(0, n)), replace=False)
        scores[excluded] = -np.inf
        k = int(rng.integers(1, n - len(excluded) + 1)) if n > len(excluded) else 0
        got = top_k(scores, k)
        reference = np.lexsort((np.arange(n), -scores))[:k]
        assert len(set(got.tolist())) == k and not set(got.tolist()) & set(excluded.tolist())
        assert np.array_equal(scores[got], scores[reference])


def test_cache_follows_publish_ingest_and_erasure(sessions: sessionmaker[Session]) -> None:
    cache = ModelCache(sessions=sessions, refresh_s=0.05)
    cache.start()
    try:
        with pytest.raises(Conflict):
            cache.get()
        _federation(sessions)
        assert cache.get().version == 1  # no model yet is never cached
        assert recommend(snapshot=cache.get(), user_id="u3", k=2)["fallback"] is None
        # Another writer (another process, here a plain session) adds a user: the poller picks it up.
        with sessions() as session:
            _ingest(session, [("newcomer", "i1", 4.0)])
        _eventually(lambda: "newcomer" in cache.get().user_rows)
        # Erasure: the process that erased forgets the user at once, before any rebuild.
        with sessions() as session:
            erasure.erase_user(session=session, external_id="u3")
        cache.forget_user("u3")
        with pytest.raises(NotFound):
            recommend(snapshot=cache.get(), user_id="u3", k=2)
        _eventually(lambda: cache.get().token is not None and "u3" not in cache.get().user_rows)
    finally:
        cache.stop()


def _eventually(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the serving cache did not catch up"
        time.sleep(0.02)
