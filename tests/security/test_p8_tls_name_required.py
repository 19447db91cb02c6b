"""P8: under TLS outside dev mode a party could be registered without `tls_name`; the coordinator then
checked the party's certificate against the URL's host only, and every `fedrec certs` server certificate
carries 127.0.0.1 and localhost, so the party's token went to any holder of a federation certificate.
A TLS coordinator outside dev mode now requires `tls_name` (422 naming the field), at registration and
when an update would leave a party without one; dev mode keeps the URL-host check."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cli.certs import federation_certs
from cli.localfed import ADMIN
from coordinator_api.main import create_app as coordinator_app
from services.db.session import upgrade
from tests.support.federation import coordinator_settings
from tests.support.servers import live_server

TOKEN = "the-coordinator-credential-for-p0-0123456789"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = federation_certs(tmp_path_factory.mktemp("certs"), parties=["p0"], hosts=["localhost", "127.0.0.1"])
    return files["ca"][0]


def test_a_tls_coordinator_requires_tls_name(tmp_path: Path, ca: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url, party_ca_file=ca))) as live, \
            httpx.Client(base_url=live.url, headers=HEADERS, timeout=30) as http:
        bare = http.post("/v1/parties", json={"party_id": "p0", "url": "https://127.0.0.1:9", "token": TOKEN})
        assert bare.status_code == 422 and bare.json()["field"] == "tls_name", bare.text
        assert http.get("/v1/parties").json() == []  # nothing stored
        pinned = http.post("/v1/parties", json={"party_id": "p0", "url": "https://127.0.0.1:9", "token": TOKEN,
                                                "tls_name": "p0"})
        assert pinned.status_code == 201 and pinned.json()["tls_name"] == "p0"
        assert http.patch("/v1/parties/p0", json={"url": "https://localhost:9"}).status_code == 200  # pin kept


def test_dev_mode_keeps_the_url_host_check(tmp_path: Path, ca: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url, party_ca_file=ca, dev_mode=True))) as live, \
            httpx.Client(base_url=live.url, headers=HEADERS, timeout=30) as http:
        r = http.post("/v1/parties", json={"party_id": "p0", "url": "https://127.0.0.1:9", "token": TOKEN})
        assert r.status_code == 201, r.text
