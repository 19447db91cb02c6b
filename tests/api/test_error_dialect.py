"""Both APIs speak one error dialect (api_common): same bodies for the same refusal, read back by raise_for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api_common.errors import ErrorRead
from cli.localfed import ADMIN as COORD_ADMIN
from coordinator_api.main import create_app
from services.db.session import upgrade
from services.errors import DomainError, NotFound, PolicyRefused, ValidationFailed, error_for
from tests.support.federation import coordinator_settings
from tests.support.party import ADMIN as PARTY_ADMIN
from tests.support.party import Party
from tests.support.servers import live_server


@pytest.fixture
def apis(party: Party, tmp_path: Path) -> Iterator[dict[str, tuple[str, str, str]]]:
    """Both live apps: name → (base URL, admin token, an admin route taking a JSON list body)."""
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(create_app(coordinator_settings(url))) as coord:
        yield {"party": (party.url, PARTY_ADMIN, "/v1/interactions"),
               "coordinator": (coord.url, COORD_ADMIN, "/v1/parties")}


def _check(resp: httpx.Response, status: int, code: str, cls: type[DomainError]) -> dict[str, object]:
    """The status, the code, a body that is an ErrorRead, and raise_for's reading of it."""
    assert resp.status_code == status, resp.text
    body: dict[str, object] = resp.json()
    assert body["code"] == code and body["detail"]
    ErrorRead.model_validate(body)
    assert type(error_for(resp.status_code, resp.content)) is cls
    return body


@pytest.mark.parametrize("name", ["party", "coordinator"])
def test_one_dialect(apis: dict[str, tuple[str, str, str]], name: str) -> None:
    base, admin, route = apis[name]
    missing = httpx.post(base + route, json={})
    _check(missing, 401, "unauthorized", PolicyRefused)
    assert missing.headers["www-authenticate"] == "Bearer"
    _check(httpx.post(base + route, json={}, headers={"Authorization": "Bearer wrong"}), 403, "forbidden",
           PolicyRefused)
    auth = {"Authorization": f"Bearer {admin}"}
    body = _check(httpx.post(base + route, json={"rows": [{"x": 1}]}, headers=auth), 422, "validation_failed",
                  ValidationFailed)
    errors = body["errors"]
    assert isinstance(errors, list) and errors and body["field"] == errors[0]["field"]
    assert all(set(e) == {"row", "field", "reason"} for e in errors)
    assert str(body["detail"]).startswith("request rejected, nothing stored")
    _check(httpx.get(base + "/v1/no-such-route", headers=auth), 404, "not_found", NotFound)
