"""Credentials over real HTTP: each opens only its own routes; failures change nothing."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import APIRouter

from party_api.deps import ApiKeyDep, CoordinatorDep
from party_api.main import create_app
from services.config import PartySettings
from services.db.session import make_engine, migrate
from tests.support.databases import snapshot
from tests.support.party import ADMIN, API_KEY, COORDINATOR, csv_body, party_settings
from tests.support.servers import LiveServer, live_server

BEARER_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
BEARER_COORD = {"Authorization": f"Bearer {COORDINATOR}"}
KEY = {"X-API-Key": API_KEY}


@pytest.fixture
def server(tmp_path) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    """A live party with two extra probe routes guarded by the coordinator and API-key deps."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    app = create_app(party_settings(url))
    probes = APIRouter(prefix="/probe", tags=["probe"])
    probes.add_api_route("/coordinator", lambda: {"ok": True}, dependencies=[CoordinatorDep])
    probes.add_api_route("/serving", lambda: {"ok": True}, dependencies=[ApiKeyDep])
    app.include_router(probes)
    with live_server(app) as live:
        yield live


@pytest.mark.parametrize(
    "method, path, headers, status",
    [
        ("GET", "/v1/summary", {}, 401),
        ("GET", "/v1/summary", {"Authorization": "Bearer nope"}, 403),
        ("GET", "/v1/summary", {"Authorization": f"Basic {ADMIN}"}, 401),
        ("GET", "/v1/summary", BEARER_COORD, 403),
        ("GET", "/v1/summary", KEY, 401),
        ("GET", "/v1/summary", BEARER_ADMIN, 200),
        ("GET", "/probe/coordinator", {}, 401),
        ("GET", "/probe/coordinator", BEARER_ADMIN, 403),
        ("GET", "/probe/coordinator", BEARER_COORD, 200),
        ("GET", "/probe/serving", BEARER_ADMIN, 401),
        ("GET", "/probe/serving", {"X-API-Key": ADMIN}, 403),
        ("GET", "/probe/serving", KEY, 200),
        # erasure: the admin's, or the coordinator's federation-wide erasure (404: past auth, no such user)
        ("DELETE", "/v1/users/u1", BEARER_COORD, 404),
        ("DELETE", "/v1/users/u1", BEARER_ADMIN, 404),
        ("DELETE", "/v1/users/u1", {"Authorization": "Bearer nope"}, 403),
        ("DELETE", "/v1/users/u1", KEY, 401),
        ("GET", "/v1/users/u1", BEARER_COORD, 403),  # reading what a party holds stays the admin's
    ],
)
def test_each_credential_opens_only_its_routes(
    server: LiveServer, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    response = httpx.request(method, server.url + path, headers=headers)
    assert response.status_code == status, response.text
    if status in (401, 403):
        assert response.json()["code"] == {401: "unauthorized", 403: "forbidden"}[status]
    if status == 401 and "Authorization" in str(response.json()["detail"]):
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, BEARER_COORD, KEY])
def test_rejected_credentials_store_nothing(
    server: LiveServer, tmp_path, headers: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'party.db'}")
    httpx.post(
        f"{server.url}/v1/interactions",
        headers=BEARER_ADMIN,
        json={"rows": [{"user_id": "a", "item_id": "b", "rating": 3}]},
    ).raise_for_status()
    before = snapshot(engine)
    body = csv_body([("u1", "i1", 4, 1), ("u2", "i1", 5, 2)])
    bulk = httpx.post(
        f"{server.url}/v1/interactions/bulk",
        content=body,
        headers={**headers, "Content-Type": "text/csv"},
    )
    # the coordinator's credential may erase (federation-wide erasure), so "a" is erased only by the others
    erase = httpx.delete(f"{server.url}/v1/users/{'absent' if headers == BEARER_COORD else 'a'}", headers=headers)
    batch = httpx.post(
        f"{server.url}/v1/interactions",
        headers=headers,
        json={"rows": [{"user_id": "u1", "item_id": "i1", "rating": 3}]},
    )
    assert {bulk.status_code, batch.status_code} <= {401, 403}
    assert erase.status_code in ({404} if headers == BEARER_COORD else {401, 403})
    assert snapshot(engine) == before
    engine.dispose()


def test_secrets_have_no_working_default_outside_dev_mode() -> None:
    with pytest.raises(ValueError, match="missing secrets"):
        PartySettings(database_url="sqlite://")
    with pytest.raises(ValueError, match="must all differ"):
        PartySettings(database_url="sqlite://", admin_token="same", coordinator_token="same")
    dev = PartySettings(database_url="sqlite://", dev_mode=True)
    assert dev.admin_token and dev.coordinator_token and dev.api_keys
