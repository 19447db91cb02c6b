"""F3: the coordinator's recommendation fan-out path-encodes the caller's user id, so a client-key
holder cannot steer the path or query the coordinator requests from a party (with its credential),
cannot read a party's error detail, and a control character is a 422, not a 502."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli.localfed import API_KEY
from services.coordinator.client import party_path
from tests.support.federation import Federation, federation

KEY = {"X-API-Key": API_KEY}


class PathRecorder:
    """ASGI wrapper keeping the (path, query) of every serving request a party receives."""

    def __init__(self, app: Any, seen: list[tuple[str, bytes]]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/v1/federation"):
            self.seen.append((scope["path"], scope["query_string"]))
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, list[tuple[str, bytes]]]]:
    seen: list[tuple[str, bytes]] = []
    with federation(tmp_path_factory.mktemp("f3"), n_parties=2, wrap=lambda _, app: PathRecorder(app, seen)) as f:
        yield f, seen


@pytest.mark.parametrize("raw, user_id", [("1%3Fk%3D1000%26x%3D", "1?k=1000&x="), ("%2E%2E", ".."),
                                          ("a%23b", "a#b"), ("%25", "%")])
def test_user_id_reaches_the_party_as_one_segment(fed: tuple[Federation, list[tuple[str, bytes]]], raw: str,
                                                  user_id: str) -> None:
    f, seen = fed
    seen.clear()
    r = httpx.get(f"{f.coordinator.url}/v1/users/{raw}/recommendations", headers=KEY, params={"k": 3})
    assert r.status_code in (404, 409, 502) or r.status_code == 200, r.text
    paths = {p for p, _ in seen}
    assert paths == {f"/v1/users/{user_id}/recommendations"}, seen  # decoded by the party: the id, whole
    assert {q for _, q in seen} == {b"k=3"}  # the caller's k, and nothing the id smuggled in


def test_party_error_detail_is_not_relayed(fed: tuple[Federation, list[tuple[str, bytes]]]) -> None:
    f, _ = fed
    r = httpx.get(f"{f.coordinator.url}/v1/users/user-1/recommendations", headers=KEY)
    # No model is published yet: each party refuses with 409; the app sees the code, never the detail.
    body = r.json()
    assert "published" not in r.text, body
    if r.status_code == 200:
        assert set(body["unavailable"].values()) <= {"model_not_ready", "conflict"}


def test_control_character_is_422_not_502(fed: tuple[Federation, list[tuple[str, bytes]]]) -> None:
    f, seen = fed
    seen.clear()
    r = httpx.get(f"{f.coordinator.url}/v1/users/a%01b/recommendations", headers=KEY)
    assert r.status_code == 422 and r.json()["field"] == "user_id", r.text
    assert seen == []  # no party was asked


def test_party_path_encodes_each_segment_whole() -> None:
    assert party_path("v1", "users", "1?k=1000&x=", "recommendations") == "/v1/users/1%3Fk%3D1000%26x%3D/recommendations"
    assert party_path("v1", "users", "..", "x") == "/v1/users/%2E%2E/x"
    assert party_path("v1", "users", "a/b") == "/v1/users/a%2Fb"
