"""F12: both OpenAPI documents declare their security schemes and the guard's answers (401/403/413/422),
and run timestamps are timezone-aware RFC 3339."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.localfed import ADMIN
from coordinator_api.main import create_app as coordinator_app
from party_api.main import create_app as party_app
from services.config import CoordinatorSettings, PartySettings
from services.db.session import upgrade
from tests.support.federation import coordinator_settings
from tests.support.servers import live_server


def _documents() -> dict[str, dict[str, Any]]:
    party = party_app(PartySettings(dev_mode=True, database_url="sqlite://"))
    coordinator = coordinator_app(CoordinatorSettings(dev_mode=True, database_url="sqlite://"), resume=False)
    return {"party": party.openapi(), "coordinator": coordinator.openapi()}


@pytest.mark.parametrize("name", ["party", "coordinator"])
def test_security_schemes_and_guard_answers_are_documented(name: str) -> None:
    doc = _documents()[name]
    schemes = doc["components"]["securitySchemes"]
    assert {"AdminToken", "ApiKey"} <= set(schemes)
    guarded = 0
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert "413" in op["responses"], (method, path)
            if op.get("parameters") or op.get("requestBody"):
                assert "422" in op["responses"], (method, path)
            if path.startswith("/v1/"):
                assert op.get("security"), (method, path)
                assert {"401", "403", "429"} <= set(op["responses"]), (method, path)
                guarded += 1
    assert guarded >= 10


def test_run_timestamps_carry_a_time_zone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with live_server(coordinator_app(coordinator_settings(url))) as server:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        for pid in ("a", "b"):  # unreachable: the run fails in the background, its record stays
            party = {"party_id": pid, "url": "http://127.0.0.1:9", "token": "t" * 32}
            assert httpx.post(f"{server.url}/v1/parties", headers=auth, json=party).status_code == 201
        created = httpx.post(f"{server.url}/v1/runs", headers=auth, json={"rounds": 1})
        assert created.status_code == 202, created.text
        run = httpx.get(f"{server.url}/v1/runs/{created.json()['run_id']}", headers=auth).json()
        for key in ("created_at", "updated_at"):
            stamp = datetime.fromisoformat(run[key])
            assert stamp.tzinfo is not None and stamp.utcoffset() is not None, run[key]
