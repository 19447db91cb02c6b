"""Serving fan-out under a slow or down party: the coordinator asks the parties at once, each with the
COORD_FANOUT_TIMEOUT_S deadline, and answers with the merge of the others, flagged partial."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.localfed import API_KEY, free_port
from tests.support.federation import TINY_CONFIG, Federation, federation

KEY = {"X-API-Key": API_KEY}
DEADLINE_S = 0.5
SLOW_S = 5.0


class Slow:
    """ASGI wrapper that delays a party's serving answers while `on` is set (training is not delayed)."""

    def __init__(self, app: Any) -> None:
        self.app, self.on = app, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.on and scope["type"] == "http" and scope["path"].startswith(("/v1/users/", "/v1/predictions")):
            await asyncio.sleep(SLOW_S)
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, Slow]]:
    slow: dict[str, Slow] = {}

    def wrap(pid: str, app: Any) -> Any:
        slow[pid] = Slow(app)
        return slow[pid]

    with federation(tmp_path_factory.mktemp("fanout"), n_parties=3, wrap=wrap, fanout_timeout_s=DEADLINE_S) as fed:
        run = fed.client.create_run(rounds=1, min_parties=3, seed=0, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=180)
        assert status["state"] == "completed", status
        yield fed, slow["p2"]


def _merged(fed: Federation) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    r = fed.http.get(f"{fed.coordinator.url}/v1/users/user-1/recommendations", params={"k": 30}, headers=KEY)
    assert r.status_code == 200, r.text
    return r.json(), time.monotonic() - started


def test_every_party_answers_and_the_list_is_whole(trained: tuple[Federation, Slow]) -> None:
    fed, _ = trained
    body, _ = _merged(fed)
    assert body["unavailable"] == {} and body["partial"] is False
    assert {it["party_id"] for it in body["items"]} == {"p0", "p1", "p2"}


def test_a_slow_party_is_left_out_at_the_deadline(trained: tuple[Federation, Slow]) -> None:
    fed, slow = trained
    slow.on = True
    try:
        body, elapsed = _merged(fed)
    finally:
        slow.on = False
    assert elapsed < SLOW_S - 2  # the coordinator did not wait for the slow party
    assert body["partial"] is True and body["unavailable"] == {"p2": "party_unavailable"}
    assert body["items"] and {it["party_id"] for it in body["items"]} == {"p0", "p1"}
    scores = [it["score"] for it in body["items"]]
    assert scores == sorted(scores, reverse=True)


def test_a_down_party_is_listed_and_the_others_merged(trained: tuple[Federation, Slow]) -> None:
    fed, _ = trained
    url = fed.parties["p2"].url
    fed.client.register("p2", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        body, _ = _merged(fed)
    finally:
        fed.client.register("p2", url)
    assert body["partial"] is True and body["unavailable"] == {"p2": "party_unavailable"}
    assert body["items"] and {it["party_id"] for it in body["items"]} == {"p0", "p1"}


def test_predictions_of_a_slow_party_are_unavailable_at_the_deadline(trained: tuple[Federation, Slow]) -> None:
    fed, slow = trained
    body, _ = _merged(fed)
    first = {it["party_id"]: it["item_id"] for it in body["items"]}
    pairs = [{"user_id": "user-1", "item_id": first[pid], "party_id": pid} for pid in ("p0", "p1", "p2")]
    slow.on = True
    try:
        started = time.monotonic()
        r = fed.http.post(f"{fed.coordinator.url}/v1/predictions", json={"pairs": pairs}, headers=KEY)
        elapsed = time.monotonic() - started
    finally:
        slow.on = False
    assert r.status_code == 200, r.text
    assert elapsed < SLOW_S - 2  # the coordinator did not wait for the slow party
    got = r.json()
    assert got["partial"] is True and got["unavailable"] == {"p2": "party_unavailable"}
    assert [p["status"] for p in got["predictions"]] == ["ok", "ok", "unavailable"]
