"""P7: one party answering 200 without `items` made merged recommendations and `/v1/predictions` answer 500
for every client. A party's 2xx answer is now checked for the shape merging reads; a malformed one (or one
that is not a JSON object) lists that party as unavailable and the others' answers are served.
A real coordinator process; the parties are live HTTP servers, one of them answering malformed bodies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from cli.localfed import ADMIN, API_KEY, Proc, coordinator_proc
from tests.support.servers import LiveServer

PARTY_TOKEN = "party-token-Zq3x9LmP0aB7cD2eF5gH8jK1"
BROKEN: dict[str, Any] = {
    "no_items": ({"user_id": "u1", "fallback": None}, {"score_kind": "rating"}),
    "bad_items": ({"user_id": "u1", "items": [{"item_id": 7, "score": "high"}], "fallback": None},
                  {"predictions": [{"rating": "x"}], "skipped": []}),
    "not_json": ("<html>ok</html>", "<html>ok</html>"),
    "json_list": ([1, 2, 3], [1, 2, 3]),
    "short": ({"user_id": "u1", "items": [{"item_id": "i1", "score": float("nan")}], "fallback": None},
              {"predictions": [], "skipped": []}),
}


def _party(kind: str | None) -> FastAPI:
    app = FastAPI()

    def answer(body: Any) -> Response:
        if isinstance(body, str):
            return PlainTextResponse(body)
        if kind == "short" and isinstance(body, dict) and body.get("items"):
            return Response('{"user_id": "u1", "items": [{"item_id": "i1", "score": NaN}], "fallback": null}',
                            media_type="application/json")
        return JSONResponse(body)

    @app.get("/v1/users/{user_id}/recommendations")
    async def recommend(user_id: str) -> Response:
        if kind is None:
            return JSONResponse({"user_id": user_id, "items": [{"item_id": "good-1", "score": 4.5}], "fallback": None})
        return answer(BROKEN[kind][0])

    @app.post("/v1/predictions")
    async def predict(request: Request) -> Response:
        pairs = (await request.json())["pairs"]
        if kind is None:
            return JSONResponse({"predictions": [{"user_id": p["user_id"], "item_id": p["item_id"], "rating": 3.5,
                                                  "fallback": None} for p in pairs], "skipped": []})
        return answer(BROKEN[kind][1])

    return app


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, dict[str, LiveServer]]]:
    servers = {"good": LiveServer(_party(None)).start(), **{k: LiveServer(_party(k)).start() for k in BROKEN}}
    coord = coordinator_proc(tmp_path_factory.mktemp("p7"), extra_env={"COORD_FANOUT_TIMEOUT_S": "30"}).start()
    try:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        for pid, live in servers.items():
            r = httpx.post(f"{coord.url}/v1/parties", headers=admin,
                           json={"party_id": pid.replace("_", "-"), "url": live.url, "token": PARTY_TOKEN})
            assert r.status_code == 201, r.text
        yield coord, servers
    finally:
        coord.stop()
        for live in servers.values():
            live.stop()


def test_merged_recommendations_list_malformed_parties_as_unavailable(
        setup: tuple[Proc, dict[str, LiveServer]]) -> None:
    coord, _ = setup
    r = httpx.get(f"{coord.url}/v1/users/u1/recommendations", params={"k": 5}, headers={"X-API-Key": API_KEY},
                  timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [it["item_id"] for it in body["items"]] == ["good-1"]
    assert set(body["unavailable"]) == {k.replace("_", "-") for k in BROKEN} and body["partial"] is True


def test_predictions_list_malformed_parties_as_unavailable(setup: tuple[Proc, dict[str, LiveServer]]) -> None:
    coord, _ = setup
    pairs = [{"user_id": "u1", "item_id": "i1", "party_id": pid} for pid in ["good", *(k.replace("_", "-")
                                                                                       for k in BROKEN)]]
    r = httpx.post(f"{coord.url}/v1/predictions", json={"pairs": pairs}, headers={"X-API-Key": API_KEY}, timeout=30)
    assert r.status_code == 200, r.text
    out = {p["party_id"]: p for p in r.json()["predictions"]}
    assert out["good"]["status"] == "ok" and out["good"]["rating"] == 3.5
    for k in BROKEN:
        assert out[k.replace("_", "-")]["status"] == "unavailable", out
