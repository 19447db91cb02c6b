"""N12: the dashboard could be framed and lacked nosniff; ids accepted U+202E; item metadata accepted
NUL and ANSI escapes. Now every answer refuses framing and sniffing, and ids and metadata refuse
bidirectional overrides and control characters with a 422 naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coordinator_api.main import create_app as coordinator_app
from services.db.session import upgrade
from tests.support.federation import coordinator_settings
from tests.support.party import ADMIN, Party
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url))) as server:
        yield server.url


def _no_framing_no_sniffing(r: httpx.Response) -> None:
    assert r.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert r.headers["X-Content-Type-Options"] == "nosniff"


def test_dashboard_and_every_answer_refuse_framing_and_sniffing(coordinator: str, party: Party) -> None:
    page = httpx.get(f"{coordinator}/dashboard/runs/r1")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    _no_framing_no_sniffing(page)
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]  # the page's own policy is kept
    for answer in (httpx.get(f"{coordinator}/health"), httpx.get(f"{coordinator}/v1/runs"),  # 200, guard's 401
                   httpx.get(f"{coordinator}/nowhere"), httpx.get(f"{party.url}/v1/summary", headers=AUTH),
                   httpx.get(f"{party.url}/v1/summary")):
        _no_framing_no_sniffing(answer)


def _refused(r: httpx.Response, field: str, reason: str) -> None:
    assert r.status_code == 422, (r.status_code, r.text[:300])
    body = r.json()
    named = {body.get("field")} | {e.get("field") for e in body.get("errors") or []}
    assert field in named and reason in r.text, body


@pytest.mark.parametrize("user_id", ["alice\u202eevil", "a\u2066b", "x\u202ay"])
def test_ids_with_bidi_overrides_are_refused(party: Party, user_id: str) -> None:
    rows = {"rows": [{"user_id": user_id, "item_id": "i1", "rating": 3}]}
    _refused(party.admin.post("/v1/interactions", json=rows), "user_id", "bidirectional override")
    csv = f"user_id,item_id,rating\n{user_id},i1,3\n".encode()
    _refused(party.admin.post("/v1/interactions/bulk", content=csv, headers={"Content-Type": "text/csv"}),
             "user_id", "bidirectional override")
    _refused(party.admin.get(f"/v1/users/{user_id}"), "external_id", "bidirectional override")


@pytest.mark.parametrize("metadata, reason", [
    ({"title": "Heat\x00"}, "U+0000"),
    ({"title": "\x1b[2J\x1b[31mpwned"}, "U+001B"),
    ({"genres": ["ok", "x\u202eyy"]}, "bidirectional override"),
    ({"bad\x1bkey": "v"}, "U+001B"),
])
def test_item_metadata_refuses_control_characters_and_bidi_overrides(party: Party, metadata: dict[str, object],
                                                                   reason: str) -> None:
    r = party.admin.post("/v1/items", content=json.dumps({"rows": [{"external_id": "i1", "metadata": metadata}]}),
                         headers={"Content-Type": "application/json"})
    _refused(r, "metadata", reason)
    ok = party.admin.post("/v1/items", json={"rows": [{"external_id": "i1",
                                                       "metadata": {"title": "Heat", "plot": "line one\n\tline two"}}]})
    assert ok.status_code == 200, ok.text
