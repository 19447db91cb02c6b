"""P13: a registration URL with userinfo (`https://user:secret@host`) was stored and listed back in clear.
Party URLs now never carry userinfo (422 naming `url`, nothing stored), a URL stored before is listed
without it, and COORD_PARTY_HOSTS optionally restricts the hosts a party URL may name."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from cli.localfed import ADMIN
from coordinator_api.main import create_app as coordinator_app
from services.db.session import upgrade
from tests.support.federation import coordinator_settings
from tests.support.servers import live_server

TOKEN = "the-coordinator-credential-for-p0-0123456789"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.mark.parametrize("bad", ["http://user:hunter2@127.0.0.1:9", "http://hunter2@127.0.0.1:9",
                                 "http://:hunter2@localhost:9/", "http://a@b@127.0.0.1:9"])
def test_userinfo_is_refused_and_never_listed(tmp_path: Path, bad: str) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url))) as live, \
            httpx.Client(base_url=live.url, headers=HEADERS, timeout=30) as http:
        r = http.post("/v1/parties", json={"party_id": "p0", "url": bad, "token": TOKEN})
        assert r.status_code == 422 and r.json()["field"] == "url" and "hunter2" not in r.text, r.text
        assert http.get("/v1/parties").json() == []
        assert http.post("/v1/parties", json={"party_id": "p0", "url": "http://127.0.0.1:9",
                                              "token": TOKEN}).status_code == 201
        moved = http.patch("/v1/parties/p0", json={"url": bad})
        assert moved.status_code == 422 and "hunter2" not in moved.text
        assert "hunter2" not in http.get("/v1/parties").text


def test_a_url_stored_with_userinfo_is_listed_without_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url))) as live, \
            httpx.Client(base_url=live.url, headers=HEADERS, timeout=30) as http:
        assert http.post("/v1/parties", json={"party_id": "p0", "url": "http://127.0.0.1:9",
                                              "token": TOKEN}).status_code == 201
        engine = create_engine(url)
        with engine.begin() as c:  # as a registration from before the rule left it
            c.execute(text("UPDATE parties SET url = 'http://old:hunter2@127.0.0.1:9'"))
        engine.dispose()
        listed = http.get("/v1/parties").json()
        assert listed[0]["url"] == "http://127.0.0.1:9" and "hunter2" not in http.get("/v1/parties/p0").text


def test_the_host_allow_list(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    settings = coordinator_settings(url, party_hosts=["127.0.0.1", "Party-A.example"])
    with live_server(coordinator_app(settings)) as live, \
            httpx.Client(base_url=live.url, headers=HEADERS, timeout=30) as http:
        out = http.post("/v1/parties", json={"party_id": "p0", "url": "http://evil.example:9", "token": TOKEN})
        assert out.status_code == 422 and out.json()["field"] == "url" and "COORD_PARTY_HOSTS" in out.text
        for pid, ok in (("p1", "http://127.0.0.1:9"), ("p2", "https://party-a.example")):
            assert http.post("/v1/parties", json={"party_id": pid, "url": ok, "token": TOKEN}).status_code == 201
        assert http.patch("/v1/parties/p1", json={"url": "http://10.0.0.1:9"}).status_code == 422
