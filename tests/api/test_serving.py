"""Party serving API over real HTTP: predictions, top-K, unknown ids, cold users, auth, no model yet."""

from __future__ import annotations

import httpx
import numpy as np
from sqlalchemy.orm import Session

from services.party.serving import ServingModel, publish
from tests.support.party import API_KEY, COORDINATOR, Party

KEY = {"X-API-Key": API_KEY}
RATINGS = [("u1", "i1", 5.0), ("u1", "i2", 3.0), ("u2", "i1", 4.0), ("u2", "i3", 2.0), ("u3", "i3", 4.0),
           ("u4", "i1", 1.0), ("u4", "i4", 4.0)]


def _model() -> ServingModel:
    """Trained users u1..u3 (u4 is cold: rated after training); items i1..i4, i4 scores highest for u1."""
    h_u = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], np.float32)
    h_v = np.array([[0.1, 0.1], [0.2, 0.0], [0.0, 0.3], [0.9, 0.0]], np.float32)
    return ServingModel(run_id="r1", round_index=9, user_ids=np.array(["u1", "u2", "u3"]),
                        item_ids=np.array(["i1", "i2", "i3", "i4"]), h_u=h_u, h_v=h_v,
                        user_bias=np.zeros(3, np.float32), item_bias=np.array([0.5, 0, 0, 0], np.float32),
                        global_bias=3.0, rating_min=1.0, rating_max=5.0)


def _load(party: Party) -> None:
    rows = [{"user_id": u, "item_id": i, "rating": r} for u, i, r in RATINGS]
    party.admin.post("/v1/interactions", json={"rows": rows}).raise_for_status()


def _serve(party: Party) -> httpx.Client:
    return httpx.Client(base_url=party.url, headers=KEY, timeout=30)


def test_no_model_yet_is_a_clear_409(party: Party) -> None:
    _load(party)
    with _serve(party) as c:
        resp = c.get("/v1/users/u1/recommendations")
    assert resp.status_code == 409 and "no trained model" in resp.json()["detail"]


def test_predictions_and_recommendations(party: Party) -> None:
    _load(party)
    with Session(party.engine) as session:
        assert publish(session=session, model=_model()) == 1
    with _serve(party) as c:
        pred = c.post("/v1/predictions", json={"pairs": [{"user_id": "u1", "item_id": "i4"},
                                                         {"user_id": "u4", "item_id": "i2"}]}).json()
        first = pred["predictions"][0]
        assert first["fallback"] is None and abs(first["rating"] - 3.9) < 1e-5  # μ + b_v + h_u·h_v
        assert pred["predictions"][1]["fallback"] == "popularity" and pred["predictions"][1]["rating"] == 3.0
        rec = c.get("/v1/users/u1/recommendations", params={"k": 5}).json()
        assert [it["item_id"] for it in rec["items"]] == ["i4", "i3"]  # i1, i2 already rated by u1
        assert rec["fallback"] is None and rec["model_version"] == 1 and rec["run_id"] == "r1"
        cold = c.get("/v1/users/u4/recommendations", params={"k": 1}).json()
        assert cold["fallback"] == "popularity" and [it["item_id"] for it in cold["items"]] == ["i3"]


def test_unknown_ids_bad_input_and_auth(party: Party) -> None:
    _load(party)
    with Session(party.engine) as session:
        publish(session=session, model=_model())
    with _serve(party) as c:
        unknown_user = c.get("/v1/users/ghost/recommendations")
        assert unknown_user.status_code == 404 and "ghost" in unknown_user.json()["detail"]
        bad_item = c.post("/v1/predictions", json={"pairs": [{"user_id": "u1", "item_id": "i1"},
                                                             {"user_id": "u1", "item_id": "nope"}]})
        assert bad_item.status_code == 404 and bad_item.json()["row"] == 1 and bad_item.json()["field"] == "item_id"
        bad_user = c.post("/v1/predictions", json={"pairs": [{"user_id": "zz", "item_id": "i1"}]})
        assert bad_user.status_code == 404 and bad_user.json()["field"] == "user_id"
        assert c.post("/v1/predictions", json={"pairs": []}).status_code == 422
        assert c.get("/v1/users/u1/recommendations", params={"k": 0}).status_code == 422
    assert httpx.get(f"{party.url}/v1/users/u1/recommendations").status_code == 401
    assert httpx.get(f"{party.url}/v1/users/u1/recommendations", headers={"X-API-Key": "bad"}).status_code == 403
    coordinator = httpx.get(f"{party.url}/v1/users/u1/recommendations",
                            headers={"Authorization": f"Bearer {COORDINATOR}"})
    assert coordinator.status_code == 200
    admin_is_not_enough = httpx.get(f"{party.url}/v1/users/u1/recommendations",
                                    headers={"Authorization": "Bearer test-admin-token"})
    assert admin_is_not_enough.status_code == 401


def test_newer_model_replaces_older(party: Party) -> None:
    _load(party)
    with Session(party.engine) as session:
        publish(session=session, model=_model())
        flipped = _model()
        object.__setattr__(flipped, "h_v", flipped.h_v[::-1].copy())
        assert publish(session=session, model=flipped) == 2
    with _serve(party) as c:
        rec = c.get("/v1/users/u1/recommendations").json()
    assert rec["model_version"] == 2


def _ranking_model() -> ServingModel:
    """D = 3 with one ranking-only coordinate (rating_dim 2) and a ranking bias c_v."""
    base = _model()
    h_u = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], np.float32)
    h_v = np.array([[0.1, 0.1, 0.0], [0.2, 0.0, 0.0], [0.0, 0.3, 0.0], [0.9, 0.0, 5.0]], np.float32)
    return ServingModel(**{**{k: getattr(base, k) for k in base.__dataclass_fields__}, "h_u": h_u, "h_v": h_v,
                           "rank_bias": np.array([0.0, 0.0, 1.5, 0.0], np.float32), "rating_dim": 2})


def test_ranking_score_serves_the_top_k_and_ratings_stay_on_the_scale(party: Party) -> None:
    _load(party)
    # u1's rating of i2 is held out as test: the model never saw it, so it stays a candidate
    party.admin.put("/v1/evaluation-split", json={"rows": [{"user_id": "u1", "item_id": "i2", "split": "test"}]}
                    ).raise_for_status()
    model = _ranking_model()
    assert ServingModel.from_bytes(model.to_bytes()).rating_dim == 2
    with Session(party.engine) as session:
        publish(session=session, model=model)
    with _serve(party) as c:
        rec = c.get("/v1/users/u1/recommendations", params={"k": 5}).json()
        # s = h_u·h_v (all 3 coordinates) + c_v: i4 0.9 + 10 = 10.9 (unclipped), i3 1.5, i2 0.2; i1 rated in train
        assert [it["item_id"] for it in rec["items"]] == ["i4", "i3", "i2"]
        assert [round(it["score"], 4) for it in rec["items"]] == [10.9, 1.5, 0.2]
        pred = c.post("/v1/predictions", json={"pairs": [{"user_id": "u1", "item_id": "i4"}]}).json()
        assert abs(pred["predictions"][0]["rating"] - 3.9) < 1e-5  # μ + b_v + the first 2 coordinates only


def test_erasure_is_served_at_once(party: Party) -> None:
    _load(party)
    with Session(party.engine) as session:
        publish(session=session, model=_model())
    with _serve(party) as c:
        assert c.get("/v1/users/u1/recommendations").status_code == 200  # the snapshot is built and held
        assert party.admin.delete("/v1/users/u1").status_code == 200
        gone = c.get("/v1/users/u1/recommendations")
        assert gone.status_code == 404 and "u1" in gone.json()["detail"]
        pair = c.post("/v1/predictions", json={"pairs": [{"user_id": "u1", "item_id": "i4"}]})
        assert pair.status_code == 404 and pair.json()["field"] == "user_id"
        assert c.get("/v1/users/u2/recommendations").status_code == 200


def test_skip_mode_answers_the_known_pairs_and_lists_the_others(party: Party) -> None:
    _load(party)
    with Session(party.engine) as session:
        publish(session=session, model=_model())
    pairs = [{"user_id": "u1", "item_id": "i4"}, {"user_id": "u1", "item_id": "nope"},
             {"user_id": "zz", "item_id": "i1"}, {"user_id": "u4", "item_id": "i2"}]
    with _serve(party) as c:
        got = c.post("/v1/predictions", params={"unknown": "skip"}, json={"pairs": pairs}).json()
        assert got["skipped"] == [{"row": 1, "field": "item_id"}, {"row": 2, "field": "user_id"}]
        assert [(p["user_id"], p["item_id"]) for p in got["predictions"]] == [("u1", "i4"), ("u4", "i2")]
        assert abs(got["predictions"][0]["rating"] - 3.9) < 1e-5 and got["predictions"][1]["fallback"] == "popularity"
        strict = c.post("/v1/predictions", json={"pairs": pairs[:1]}).json()
        assert strict["skipped"] == [] and strict["predictions"] == got["predictions"][:1]
        bad = c.post("/v1/predictions", params={"unknown": "maybe"}, json={"pairs": pairs[:1]})
        assert bad.status_code == 422 and bad.json()["field"] == "unknown"
