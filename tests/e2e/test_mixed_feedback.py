"""A federation of an explicit and an implicit party, as separate processes over real HTTP.

`films` records 1–5 star ratings; `books` records implicit feedback (PARTY_FEEDBACK=implicit): its rows
are interactions with a weight (here 1 or 2 for 4 or 5 stars; the lower ratings are not recorded). A
run without the ranking objective is refused by books; the default run completes, both parties serve
top-K, books answers predictions with ranking scores and says so, and the run's pooled test RMSE is
films' alone: it equals the RMSE of films' served predictions on its own test ratings.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from cli.localfed import (
    ADMIN,
    API_KEY,
    COORD_TOKEN,
    CoordinatorClient,
    coordinator_proc,
    load_party,
    party_proc,
    start_all,
)
from services.data.tastes import generate_tastes
from services.data.types import Dataset, Ratings
from tests.support.released import released_model

ROUNDS = 6
CONFIG = {"dim": 8, "rank_dims": 4}  # the default preset (tuned-ranking), smaller
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
KEY_H = {"X-API-Key": API_KEY}


def _parties() -> tuple[Dataset, list[tuple[str, str, float, str]]]:
    """films: the even items' ratings; books: the odd items' 4- and 5-star ratings as weighted interactions."""
    ds = generate_tastes(150, 240, seed=11, min_count=20)
    splits = {"train": ds.train, "valid": ds.valid, "test": ds.test}

    def part(r: Ratings, even: bool) -> Ratings:
        return r.subset(np.flatnonzero((r.item_ids.astype(np.int64) % 2 == 0) == even))

    assert ds.valid is not None
    films = Dataset("films", part(ds.train, True), part(ds.test, True), part(ds.valid, True))
    books = []
    for name, r in splits.items():
        if r is not None:
            odd = part(r, False)
            books += [(str(u), str(i), float(x) - 3.0, name)
                      for u, i, x in zip(odd.user_ids.tolist(), odd.item_ids.tolist(), odd.ratings.tolist()) if x >= 4]
    return films, books


def _ingest_books(http: httpx.Client, url: str, rows: list[tuple[str, str, float, str]]) -> None:
    body = "user_id,item_id,weight\n" + "".join(f"{u},{i},{w:g}\n" for u, i, w, _ in rows)
    r = http.post(f"{url}/v1/interactions/bulk", content=body.encode(), headers={**ADMIN_H, "Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    labels = [{"user_id": u, "item_id": i, "split": s} for u, i, _, s in rows if s != "train"]
    r = http.put(f"{url}/v1/evaluation-split", json={"rows": labels}, headers=ADMIN_H)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("mixed")
    films, books = _parties()
    procs = {"films": party_proc("films", root),
             "books": party_proc("books", root, extra_env={"PARTY_FEEDBACK": "implicit"}),
             "coordinator": coordinator_proc(root)}
    start_all(list(procs.values()))
    try:
        with httpx.Client(timeout=120) as http:
            load_party(http, procs["films"].url, films)
            _ingest_books(http, procs["books"].url, books)
            coord = CoordinatorClient(procs["coordinator"].url, http=http)
            for pid in ("films", "books"):
                coord.register(pid, procs[pid].url, COORD_TOKEN)
            refused = coord.wait(coord.create_run(rounds=2, config={**CONFIG, "rank_weight": 0.0, "rank_dims": 0},
                                                  min_parties=2)["run_id"], timeout=120)
            run = coord.wait(coord.create_run(rounds=ROUNDS, config=CONFIG, min_parties=2)["run_id"], timeout=600)
            yield {"root": root, "http": http, "urls": {p: procs[p].url for p in procs}, "films": films, "books": books,
                   "refused": refused, "run": run}
    finally:
        for proc in procs.values():
            proc.stop()


def test_an_implicit_party_refuses_a_run_without_the_ranking_objective(mixed: dict[str, Any]) -> None:
    refused = mixed["refused"]
    assert refused["state"] == "failed", refused
    why = refused["excluded"].get("books", "")
    assert "policy_refused" in why and "rank_weight" in why and "films" not in refused["excluded"], refused


def test_the_mixed_run_completes_and_pooled_rmse_is_the_explicit_partys(mixed: dict[str, Any]) -> None:
    run, films, http, url = mixed["run"], mixed["films"], mixed["http"], mixed["urls"]["films"]
    assert run["state"] == "completed", run["detail"]
    assert run["rounds_done"] == ROUNDS and not run["excluded"]
    pooled = run["rounds"][-1]["metrics"]["test_rmse"]
    pairs = [{"user_id": str(u), "item_id": str(i)} for u, i in zip(films.test.user_ids.tolist(),
                                                                     films.test.item_ids.tolist())]
    r = http.post(f"{url}/v1/predictions", json={"pairs": pairs}, headers=KEY_H)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["score_kind"] == "rating"
    served = [(p["rating"], float(x), p["user_id"], p["item_id"])
              for p, x in zip(body["predictions"], films.test.ratings.tolist())
              if p["fallback"] is None]  # the aligned users: the ratings the run scores
    assert len(served) > 100 and all(1.0 <= s <= 5.0 for s, *_ in served)
    # the run's pooled figure is films' federated model alone (what it serves adds films' rating component)
    model = released_model(mixed["root"] / "films" / "party.db")
    users = np.array([list(model.user_ids).index(u) for *_, u, _ in served])
    items = np.array([list(model.item_ids).index(i) for *_, i in served])
    np.testing.assert_allclose([s for s, *_ in served], model.scores(users, items), atol=1e-6)
    fed_only = model.without_component().scores(users, items)
    rmse = math.sqrt(float(np.mean((fed_only - np.array([x for _, x, *_ in served])) ** 2)))
    # books' weights (1 and 2) would pull the pooled figure far from films' own if they were scored
    assert pooled == pytest.approx(rmse, rel=1e-3)


def test_both_parties_serve_top_k_and_the_implicit_one_answers_ranking_scores(mixed: dict[str, Any]) -> None:
    http, urls, books = mixed["http"], mixed["urls"], mixed["books"]
    trained: dict[str, set[str]] = {}
    for u, i, _, split in books:
        if split == "train":
            trained.setdefault(u, set()).add(i)
    user = max(trained, key=lambda u: len(trained[u]))
    tops = {}
    for pid in ("films", "books"):
        r = http.get(f"{urls[pid]}/v1/users/{user}/recommendations", params={"k": 10}, headers=KEY_H)
        assert r.status_code == 200, r.text
        tops[pid] = r.json()
        assert tops[pid]["fallback"] is None and len(tops[pid]["items"]) == 10
    top = tops["books"]["items"]
    assert not {it["item_id"] for it in top} & trained[user]  # the user's own interactions are never proposed
    r = http.post(f"{urls['books']}/v1/predictions", json={"pairs": [{"user_id": user, "item_id": it["item_id"]}
                                                                     for it in top]}, headers=KEY_H)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["score_kind"] == "ranking_score"
    # the prediction is the score top-K ranks by (not a rating: nothing clips it to a scale)
    assert [p["rating"] for p in body["predictions"]] == pytest.approx([it["score"] for it in top], rel=1e-5)
    pairs = [{"user_id": user, "item_id": top[0]["item_id"], "party_id": "books"},
             {"user_id": user, "item_id": tops["films"]["items"][0]["item_id"], "party_id": "films"}]
    r = http.post(f"{urls['coordinator']}/v1/predictions", json={"pairs": pairs}, headers=KEY_H)
    assert r.status_code == 200, r.text
    assert [(p["status"], p["score_kind"]) for p in r.json()["predictions"]] == [("ok", "ranking_score"),
                                                                                ("ok", "rating")]
