"""Coordinator POST /v1/predictions and DELETE /v1/users/{id} over live party servers after a real run.

Predictions go to the party each pair names (and to no other, so no party sees another's item ids);
erasure goes to every enabled party, with one outcome per registered party.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.localfed import ADMIN, API_KEY, free_port
from tests.support.federation import TINY_CONFIG, Federation, federation

KEY = {"X-API-Key": API_KEY}
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


class Recorder:
    """ASGI wrapper that keeps the body of every POST /v1/predictions the party receives."""

    def __init__(self, app: Any) -> None:
        self.app, self.bodies = app, []  # type: ignore[var-annotated]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/predictions":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        self.bodies.append(json.loads(b"".join(chunks)))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Recorder]]]:
    recorders: dict[str, Recorder] = {}

    def wrap(pid: str, app: Any) -> Any:
        recorders[pid] = Recorder(app)
        return recorders[pid]

    with federation(tmp_path_factory.mktemp("coord-serving"), n_parties=3, wrap=wrap) as fed:
        run = fed.client.create_run(rounds=1, min_parties=3, seed=0, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300)
        assert status["state"] == "completed", status
        yield fed, recorders


def _top(fed: Federation, user: str, k: int = 30) -> list[dict[str, Any]]:
    r = fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", params={"k": k}, headers=KEY)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def _predict(fed: Federation, pairs: list[dict[str, str]], **headers: str) -> httpx.Response:
    return fed.http.post(f"{fed.coordinator.url}/v1/predictions", json={"pairs": pairs}, headers=headers or KEY)


def _party_rating(fed: Federation, pid: str, user: str, item: str) -> float:
    r = fed.http.post(f"{fed.parties[pid].url}/v1/predictions", headers=KEY,
                      json={"pairs": [{"user_id": user, "item_id": item}]})
    assert r.status_code == 200, r.text
    return float(r.json()["predictions"][0]["rating"])


def test_predictions_come_from_the_named_party_in_request_order(trained: tuple[Federation, dict[str, Recorder]]
                                                                ) -> None:
    fed, recorders = trained
    items = _top(fed, "user-1")
    by_party = {it["party_id"]: it for it in items}
    assert set(by_party) == {"p0", "p1", "p2"}
    pairs = [{"user_id": "user-1", "item_id": it["item_id"], "party_id": pid} for pid, it in sorted(by_party.items())]
    pairs += [{"user_id": "user-2", "item_id": by_party["p1"]["item_id"], "party_id": "p1"},
              {"user_id": "user-1", "item_id": "no-such-item", "party_id": "p0"},
              {"user_id": "nobody", "item_id": by_party["p2"]["item_id"], "party_id": "p2"}]
    for rec in recorders.values():
        rec.bodies.clear()
    r = _predict(fed, pairs)
    asked = {pid: list(rec.bodies) for pid, rec in recorders.items()}
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["partial"] is False and body["unavailable"] == {}
    got = body["predictions"]
    assert [(p["user_id"], p["item_id"], p["party_id"]) for p in got] == [
        (p["user_id"], p["item_id"], p["party_id"]) for p in pairs]
    for p in got[:4]:
        assert p["status"] == "ok" and p["reason"] is None
        assert p["rating"] == pytest.approx(_party_rating(fed, p["party_id"], p["user_id"], p["item_id"]))
    assert (got[4]["status"], got[4]["reason"], got[4]["rating"]) == ("unknown", "unknown_item", None)
    assert (got[5]["status"], got[5]["reason"]) == ("unknown", "unknown_user")
    # each party was asked once, about its own pairs only: no party saw another party's item ids
    for pid, bodies in asked.items():
        assert len(bodies) == 1
        assert [q["item_id"] for q in bodies[0]["pairs"]] == [p["item_id"] for p in pairs if p["party_id"] == pid]


def test_prediction_input_is_checked(trained: tuple[Federation, dict[str, Recorder]]) -> None:
    fed, _ = trained
    ghost = _predict(fed, [{"user_id": "user-1", "item_id": "item-1", "party_id": "p0"},
                           {"user_id": "user-1", "item_id": "item-1", "party_id": "ghost"}])
    assert ghost.status_code == 422 and (ghost.json()["field"], ghost.json()["row"]) == ("party_id", 2)
    missing = _predict(fed, [{"user_id": "user-1", "item_id": "item-1"}])
    assert missing.status_code == 422 and missing.json()["field"] == "party_id"
    assert missing.json()["errors"][0]["row"] == 1
    big = _predict(fed, [{"user_id": "u", "item_id": "i", "party_id": "p0"}] * 10_001)
    assert big.status_code == 422 and big.json()["field"] == "pairs"
    assert _predict(fed, []).status_code == 422
    assert _predict(fed, [{"user_id": "u", "item_id": "i", "party_id": "p0"}], **ADMIN_H).status_code == 401
    wrong = _predict(fed, [{"user_id": "u", "item_id": "i", "party_id": "p0"}], **{"X-API-Key": "nope"})
    assert wrong.status_code == 403


def test_a_down_or_disabled_party_leaves_its_pairs_unavailable(trained: tuple[Federation, dict[str, Recorder]]
                                                               ) -> None:
    fed, _ = trained
    items = {it["party_id"]: it["item_id"] for it in _top(fed, "user-3")}
    pairs = [{"user_id": "user-3", "item_id": items[pid], "party_id": pid} for pid in ("p0", "p1", "p2")]
    url = fed.parties["p2"].url
    fed.client.register("p2", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        down = _predict(fed, pairs).json()
    finally:
        fed.client.register("p2", url)
    assert down["partial"] is True and down["unavailable"] == {"p2": "party_unavailable"}
    assert [p["status"] for p in down["predictions"]] == ["ok", "ok", "unavailable"]
    assert down["predictions"][2]["reason"] == "party_unavailable"
    admin = httpx.Client(base_url=fed.coordinator.url, headers=ADMIN_H, timeout=30)
    admin.patch("/v1/parties/p1", json={"enabled": False}).raise_for_status()
    try:
        off = _predict(fed, pairs).json()
        none = _predict(fed, pairs[1:2])
    finally:
        admin.patch("/v1/parties/p1", json={"enabled": True}).raise_for_status()
    assert off["unavailable"] == {"p1": "party_disabled"} and off["predictions"][1]["status"] == "unavailable"
    assert none.status_code == 502  # no party could answer


def test_erasure_reaches_every_party_and_reports_each(trained: tuple[Federation, dict[str, Recorder]]) -> None:
    fed, _ = trained
    victim = "user-5"
    held = {pid: fed.http.get(f"{s.url}/v1/users/{victim}", headers=ADMIN_H).status_code == 200
            for pid, s in fed.parties.items()}
    assert any(held.values())
    coord = fed.coordinator.url
    assert fed.http.delete(f"{coord}/v1/users/{victim}", headers=KEY).status_code == 401
    assert fed.http.delete(f"{coord}/v1/users/{victim}", headers={"Authorization": "Bearer nope"}).status_code == 403
    url = fed.parties["p2"].url
    fed.client.register("p2", f"http://127.0.0.1:{free_port()}")  # p2 is down for the first attempt
    try:
        first = fed.http.delete(f"{coord}/v1/users/{victim}", headers=ADMIN_H)
    finally:
        fed.client.register("p2", url)
    assert first.status_code == 200, first.text
    outcomes = first.json()["parties"]
    assert first.json()["complete"] is False
    assert outcomes["p2"] == {"outcome": "unavailable", "reason": "party_unavailable", "interactions_deleted": None}
    for pid in ("p0", "p1"):
        assert outcomes[pid]["outcome"] == ("erased" if held[pid] else "unknown")
        if held[pid]:
            assert outcomes[pid]["interactions_deleted"] > 0
        assert fed.http.get(f"{fed.parties[pid].url}/v1/users/{victim}", headers=ADMIN_H).status_code == 404
    # the same request again once p2 is back: the others answer unknown, p2 erases
    again = fed.http.delete(f"{coord}/v1/users/{victim}", headers=ADMIN_H).json()
    assert again["complete"] is True
    assert again["parties"]["p2"]["outcome"] == ("erased" if held["p2"] else "unknown")
    assert {again["parties"][pid]["outcome"] for pid in ("p0", "p1")} == {"unknown"}
    assert fed.http.get(f"{coord}/v1/users/{victim}/recommendations", headers=KEY).status_code == 404
    assert fed.http.get(f"{coord}/v1/users/user-1/recommendations", headers=KEY).status_code == 200


def test_erasure_lists_a_disabled_party_as_not_done(trained: tuple[Federation, dict[str, Recorder]]) -> None:
    fed, _ = trained
    admin = httpx.Client(base_url=fed.coordinator.url, headers=ADMIN_H, timeout=30)
    assert fed.http.get(f"{fed.parties['p0'].url}/v1/users/user-6", headers=ADMIN_H).status_code == 200
    admin.patch("/v1/parties/p0", json={"enabled": False}).raise_for_status()
    try:
        body = admin.delete("/v1/users/user-6").json()
    finally:
        admin.patch("/v1/parties/p0", json={"enabled": True}).raise_for_status()
    assert body["complete"] is False
    assert body["parties"]["p0"] == {"outcome": "unavailable", "reason": "party_disabled", "interactions_deleted": None}
    assert fed.http.get(f"{fed.parties['p0'].url}/v1/users/user-6", headers=ADMIN_H).status_code == 200  # untouched
    assert admin.delete("/v1/users/bad%01id").status_code == 422


def test_the_top_k_sees_a_registry_change_at_once(trained: tuple[Federation, dict[str, Recorder]]) -> None:
    """The merged top-K reads parties and release from a cached view: a change through the API drops it at once
    (no wait for its refresh), so a disabled party is asked nothing on the very next request."""
    fed, _ = trained
    assert {it["party_id"] for it in _top(fed, "user-1")} == {"p0", "p1", "p2"}
    with httpx.Client(base_url=fed.coordinator.url, headers=ADMIN_H, timeout=30) as admin:
        admin.patch("/v1/parties/p1", json={"enabled": False}).raise_for_status()
        try:
            assert {it["party_id"] for it in _top(fed, "user-1")} == {"p0", "p2"}
        finally:
            admin.patch("/v1/parties/p1", json={"enabled": True}).raise_for_status()
        assert {it["party_id"] for it in _top(fed, "user-1")} == {"p0", "p1", "p2"}
