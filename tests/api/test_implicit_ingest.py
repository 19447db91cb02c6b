"""Ingest at an implicit-feedback party (PARTY_FEEDBACK=implicit) over real HTTP: weights, not ratings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from party_api.main import create_app
from services.db.session import make_engine, migrate
from tests.support.databases import snapshot
from tests.support.party import ADMIN, Party, csv_body, party_settings
from tests.support.servers import live_server

CSV = {"Content-Type": "text/csv"}
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def implicit(tmp_path: Path) -> Iterator[Party]:
    """A migrated SQLite party that records implicit feedback, behind a live uvicorn server."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    settings = party_settings(url, feedback="implicit")
    engine = make_engine(url)
    with (live_server(create_app(settings)) as server,
          httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin):
        yield Party(server.url, settings, admin, engine)
    engine.dispose()


def stored(party: Party) -> dict[tuple[str, str], float]:
    """(user, item) → the stored value (the weight) of every interaction."""
    with party.engine.connect() as c:
        rows = c.execute(text("SELECT u.external_id, i.external_id, x.rating FROM interactions x "
                              "JOIN users u ON u.id = x.user_id JOIN items i ON i.id = x.item_id"))
        return {(u, i): float(r) for u, i, r in rows}


def test_every_format_takes_interactions_with_an_optional_weight(implicit: Party) -> None:
    ok = implicit.admin.post("/v1/interactions/bulk", headers=CSV,
                             content=b"user_id,item_id\nu1,a\nu1,b\n")
    assert ok.status_code == 200, ok.text
    ok = implicit.admin.post("/v1/interactions/bulk", headers=CSV,
                             content=csv_body([("u2", "a", 3, 10), ("u2", "c", 0.5, 11)],
                                              header="user_id,item_id,weight,timestamp"))
    assert ok.status_code == 200, ok.text
    ok = implicit.admin.post("/v1/interactions/bulk", headers=NDJSON,
                             content=b'{"user_id": "u3", "item_id": "a", "weight": 12}\n{"user_id": "u3", "item_id": "b"}\n')
    assert ok.status_code == 200, ok.text
    ok = implicit.admin.post("/v1/interactions", json={"rows": [{"user_id": "u4", "item_id": "a", "weight": 2.5},
                                                                 {"user_id": "u4", "item_id": "c"}]})
    assert ok.status_code == 200, ok.text
    # files of `fedrec data split --implicit` carry rating 1.0: read as the weight
    ok = implicit.admin.post("/v1/interactions/bulk", headers=CSV,
                             content=csv_body([("u5", "b", 1.0, 0)]))
    assert ok.status_code == 200, ok.text
    assert stored(implicit) == {("u1", "a"): 1.0, ("u1", "b"): 1.0, ("u2", "a"): 3.0, ("u2", "c"): 0.5,
                                ("u3", "a"): 12.0, ("u3", "b"): 1.0, ("u4", "a"): 2.5, ("u4", "c"): 1.0,
                                ("u5", "b"): 1.0}


@pytest.mark.parametrize("path, headers, content, field, reason", [
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight\nu1,a,2\nu1,b,0\n", "weight", "0.0 outside (0.0, inf]"),
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight\nu1,a,-3\n", "weight", "-3.0 outside (0.0, inf]"),
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight\nu1,a,inf\n", "weight", "inf outside (0.0, inf]"),
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight\nu1,a,nan\n", "weight", "nan outside"),
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight\nu1,a,many\n", "weight", "'many' is not a number"),
    ("/v1/interactions/bulk", CSV, b"user_id,item_id,weight,rating\nu1,a,2,4\n", "rating", "send one of them"),
    ("/v1/interactions/bulk", NDJSON, b'{"user_id": "u1", "item_id": "a", "weight": "2"}\n', "weight",
     "must be a number"),
    ("/v1/interactions/bulk", NDJSON, b'{"user_id": "u1", "item_id": "a", "weight": 1, "rating": 1}\n', "rating",
     "send one of them"),
])
def test_bad_weights_are_refused_naming_the_field(implicit: Party, path: str, headers: dict[str, str],
                                                 content: bytes, field: str, reason: str) -> None:
    before = snapshot(implicit.engine)
    r = implicit.admin.post(path, headers=headers, content=content)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "validation_failed" and body["errors"][0]["field"] == field
    assert reason in body["errors"][0]["reason"]
    assert snapshot(implicit.engine) == before


def test_json_batch_weight_checks(implicit: Party) -> None:
    r = implicit.admin.post("/v1/interactions", json={"rows": [{"user_id": "u", "item_id": "a", "weight": -1}]})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "weight"
    r = implicit.admin.post("/v1/interactions", json={"rows": [{"user_id": "u", "item_id": "a", "weight": 0}]})
    assert r.status_code == 422 and "(0.0, inf]" in r.json()["errors"][0]["reason"]
    assert stored(implicit) == {}


def test_an_explicit_party_still_needs_a_rating_and_refuses_weights(party: Party) -> None:
    r = party.admin.post("/v1/interactions", json={"rows": [{"user_id": "u", "item_id": "a", "weight": 2}]})
    assert r.status_code == 422, r.text
    fields = {e["field"] for e in r.json()["errors"]}
    assert fields == {"weight", "rating"}  # unknown field weight, missing required field rating
    r = party.admin.post("/v1/interactions/bulk", headers=CSV, content=b"user_id,item_id\nu,a\n")
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "rating"
    r = party.admin.post("/v1/interactions", json={"rows": [{"user_id": "u", "item_id": "a", "rating": 4}]})
    assert r.status_code == 200, r.text
