"""A live party server (real uvicorn, real database) and helpers for its API tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from party_api.main import create_app
from services.config import PartySettings
from services.db.session import make_engine, migrate
from tests.support.servers import live_server

ADMIN = "test-admin-token-0123456789abcdefghij"
COORDINATOR = "test-coordinator-token-0123456789abcdefghij"
API_KEY = "test-api-key-0123456789abcdefghijklmn"


@dataclass
class Party:
    """A running party: its base URL, settings, an admin client and an engine on its database."""

    url: str
    settings: PartySettings
    admin: httpx.Client
    engine: Engine


def party_settings(database_url: str, **overrides: object) -> PartySettings:
    """Settings with real (non-dev) secrets."""
    values: dict[str, object] = {
        "database_url": database_url,
        "admin_token": ADMIN,
        "coordinator_token": COORDINATOR,
        "api_keys": [API_KEY],
        "party_id": "p1",
        "rating_min": 1.0,
        "rating_max": 5.0,
    }
    values.update(overrides)
    return PartySettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def party(tmp_path: Path) -> Iterator[Party]:
    """A migrated SQLite party behind a live uvicorn server."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    settings = party_settings(url, ingest_batch_rows=2_000)
    engine = make_engine(url)
    with live_server(create_app(settings)) as server:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as admin:
            yield Party(server.url, settings, admin, engine)
    engine.dispose()


def csv_body(
    rows: list[tuple[object, ...]], header: str = "user_id,item_id,rating,timestamp"
) -> bytes:
    """A CSV body with a header line."""
    lines = [header] + [",".join(str(v) for v in row) for row in rows]
    return ("\n".join(lines) + "\n").encode()
