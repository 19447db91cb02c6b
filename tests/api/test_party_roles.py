"""Party process roles: an `api` process forwards federation routes to the `federation` process, and
every route that cannot be served where it arrived says so (never a silent failure)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from party_api.main import create_app
from services.config import PartySettings
from services.db.session import migrate
from services.protocol import PROTOCOL_VERSION
from tests.support.party import ADMIN, API_KEY, COORDINATOR, party_settings
from tests.support.servers import LiveServer

COORD = {"Authorization": f"Bearer {COORDINATOR}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
PSI_START = "/v1/federation/runs/run-1/psi/start"


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite party database."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    return url


@pytest.fixture
def pair(db: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    """A federation process and an API process forwarding to it, on one database."""
    fed = LiveServer(create_app(party_settings(db, process_role="federation"))).start()
    api = LiveServer(create_app(party_settings(db, process_role="api", federation_url=fed.url))).start()
    try:
        yield api, fed
    finally:
        api.stop()
        fed.stop()


def test_the_api_process_forwards_federation_steps_with_status_body_and_request_id(
        pair: tuple[LiveServer, LiveServer]) -> None:
    api, fed = pair
    with httpx.Client(timeout=30) as http:
        answer = http.post(f"{api.url}{PSI_START}", headers={**COORD, "X-Request-ID": "trace-7"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-request-id"] == "trace-7"
        assert answer.headers["content-type"] == "application/octet-stream"
        assert len(answer.content) % 32 == 0  # 32-byte points (no users yet: none)
        # The federation process's own refusal comes back as it was: status, dialect body, field.
        wrong = http.post(f"{api.url}{PSI_START}", headers={**COORD, "X-Fedrec-Protocol": "0"})
        assert wrong.status_code == 409 and wrong.json()["field"] == "X-Fedrec-Protocol"
        # The run state is the federation process's: a PSI step after start works through either door.
        body = http.post(f"{api.url}/v1/federation/runs/run-1/psi/reblind", headers=COORD, content=b"")
        direct = http.post(f"{fed.url}/v1/federation/runs/run-1/psi/reblind", headers=COORD, content=b"")
        assert (body.status_code, body.content) == (direct.status_code, direct.content)


def test_the_credential_is_checked_at_the_api_process_and_again_at_the_federation_process(
        pair: tuple[LiveServer, LiveServer]) -> None:
    api, fed = pair
    with httpx.Client(timeout=30) as http:
        for url in (api.url, fed.url):
            refused = http.post(f"{url}{PSI_START}", headers={**COORD, "Authorization": f"Bearer {ADMIN}"})
            assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
            assert http.post(f"{url}{PSI_START}").status_code == 401


def test_serving_stays_on_the_api_process_and_the_federation_process_names_where_it_is(
        pair: tuple[LiveServer, LiveServer]) -> None:
    api, fed = pair
    key = {"X-API-Key": API_KEY}
    with httpx.Client(timeout=30) as http:
        assert http.get(f"{api.url}/v1/users/u1/recommendations", headers=key).json()["code"] == "model_not_ready"
        elsewhere = http.get(f"{fed.url}/v1/users/u1/recommendations", headers=key)
        assert elsewhere.status_code == 404 and "federation process" in elsewhere.json()["detail"]
        assert http.get(f"{fed.url}/health").status_code == 200


def test_a_stopped_federation_process_is_a_503_in_the_error_dialect(pair: tuple[LiveServer, LiveServer]) -> None:
    api, fed = pair
    fed.stop()
    with httpx.Client(timeout=30) as http:
        answer = http.post(f"{api.url}{PSI_START}", headers=COORD)
        erase = http.delete(f"{api.url}/v1/users/u1", headers={"Authorization": f"Bearer {ADMIN}"})
    assert answer.status_code == 503 and answer.json()["code"] == "federation_unavailable"
    assert answer.headers["retry-after"] == "1"
    assert erase.status_code == 503  # erasure runs where the run state is: refused, never half done


def test_an_api_process_without_a_federation_url_refuses_federation_routes_clearly(db: str) -> None:
    api = LiveServer(create_app(party_settings(db, process_role="api"))).start()
    try:
        with httpx.Client(timeout=30) as http:
            for method, path in (("POST", PSI_START), ("POST", "/v1/social/sessions"),
                                 ("GET", "/v1/social/budget")):
                answer = http.request(method, f"{api.url}{path}", headers=COORD)
                assert answer.status_code == 503, path
                assert answer.json()["code"] == "federation_not_configured"
                assert "PARTY_FEDERATION_URL" in answer.json()["detail"]
    finally:
        api.stop()


def test_a_federation_process_that_never_answers_is_a_504_within_the_deadline(db: str) -> None:
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        api = LiveServer(create_app(party_settings(db, process_role="api", federation_url=url,
                                                   federation_timeout_s=0.5))).start()
        try:
            with httpx.Client(timeout=30) as http:
                answer = http.post(f"{api.url}{PSI_START}", headers=COORD)
        finally:
            api.stop()
    assert answer.status_code == 504 and answer.json()["code"] == "federation_timeout"


@pytest.mark.parametrize(("values", "named"), [
    ({"process_role": "all", "federation_url": "http://127.0.0.1:9"}, "PARTY_FEDERATION_URL"),
    ({"process_role": "federation", "workers": 2}, "PARTY_WORKERS=1"),
    ({"process_role": "api", "federation_url": "ftp://host"}, "federation_url"),
])
def test_settings_refuse_role_combinations_that_cannot_work(values: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        PartySettings(dev_mode=True, **values)  # type: ignore[arg-type]


def test_erasure_through_the_api_process_runs_at_the_federation_process(pair: tuple[LiveServer, LiveServer]) -> None:
    api, _ = pair
    admin = {"Authorization": f"Bearer {ADMIN}"}
    rows = [{"user_id": "u1", "item_id": "i1", "rating": 4.0}, {"user_id": "u2", "item_id": "i1", "rating": 3.0}]
    with httpx.Client(timeout=30, headers=admin) as http:
        assert http.post(f"{api.url}/v1/interactions", json={"rows": rows}).status_code == 200
        erased = http.delete(f"{api.url}/v1/users/u1")
        assert erased.status_code == 200, erased.text
        assert erased.json()["interactions_deleted"] == 1
        assert http.get(f"{api.url}/v1/users/u1").status_code == 404
        assert http.delete(f"{api.url}/v1/users/u1").json()["code"] == "not_found"  # the federation process's 404
