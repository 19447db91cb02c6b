"""Party API through real HTTP against a live uvicorn server on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx

from party_api.main import create_app
from services.db.session import migrate
from tests.support.databases import snapshot
from tests.support.party import Party, csv_body, party_settings
from tests.support.servers import live_server


def test_health_and_readiness(party: Party) -> None:
    assert httpx.get(f"{party.url}/health").json() == {
        "status": "ok",
        "party_id": "p1",
        "detail": None,
    }
    assert httpx.get(f"{party.url}/ready").json()["status"] == "ready"


def test_readiness_reports_an_unmigrated_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = party_settings(f"sqlite:///{tmp_path / 'fresh.db'}")
    with live_server(create_app(settings)) as server:
        response = httpx.get(f"{server.url}/ready")
        assert response.status_code == 503
        assert "run migrations" in response.json()["detail"]
        migrate(settings.database_url)
        assert httpx.get(f"{server.url}/ready").status_code == 200


def test_json_batches_summary_and_counts(party: Party) -> None:
    rows = [
        {"user_id": "u1", "item_id": "i1", "rating": 4},
        {"user_id": 2, "item_id": "i1", "rating": 2.5, "timestamp": 7},
    ]
    r = party.admin.post("/v1/interactions", json={"rows": rows})
    assert r.status_code == 200 and r.json()["rows"] == 2
    links = [
        {"src_user_id": "u1", "dst_user_id": 2},
        {"src_user_id": 2, "dst_user_id": "u9", "weight": 0.5},
    ]
    assert party.admin.post("/v1/social-links", json={"rows": links}).json()["users"] == 3
    items = [{"external_id": "i1", "metadata": {"title": "Heat"}}, {"external_id": "i2"}]
    assert party.admin.post("/v1/items", json={"rows": items}).json() == {"rows": 2}
    counts = {"users": 3, "items": 2, "interactions": 2, "social_links": 2}
    assert party.admin.get("/v1/counts").json() == counts
    summary = party.admin.get("/v1/summary").json()
    assert summary == {
        "party_id": "p1",
        "role": "ratings",
        "counts": counts,
        "rating_min": 1.0,
        "rating_max": 5.0,
        "rating_histogram": {"2.5": 1, "4": 1},
    }


def _chunks(body: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_streamed_bulk_csv_and_ndjson(party: Party) -> None:
    rows = [(f"u{k % 700}", f"i{k // 700}", 1 + k % 5, 1_000 + k) for k in range(30_000)]
    body = csv_body(rows)
    r = party.admin.post(
        "/v1/interactions/bulk", content=_chunks(body, 8_192), headers={"Content-Type": "text/csv"}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["rows"], r.json()["users"], r.json()["items"]) == (30_000, 700, 43)
    ndjson = (
        b'{"src_user_id": "u1", "dst_user_id": "u2"}\n{"src_user_id": "u2", "dst_user_id": "u1"}\n'
    )
    r = party.admin.post(
        "/v1/social-links/bulk", content=ndjson, headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 200 and r.json()["rows"] == 2
    assert party.admin.get("/v1/counts").json() == {
        "users": 700,
        "items": 43,
        "interactions": 30_000,
        "social_links": 2,
    }


def test_user_view_and_erasure(party: Party) -> None:
    party.admin.post(
        "/v1/interactions/bulk",
        content=csv_body([("ann", "i1", 4, 1), ("bo", "i1", 3, 2)]),
        headers={"Content-Type": "text/csv"},
    ).raise_for_status()
    party.admin.post(
        "/v1/social-links", json={"rows": [{"src_user_id": "bo", "dst_user_id": "ann"}]}
    )
    assert party.admin.get("/v1/users/ann").json() == {
        "external_id": "ann",
        "interactions": 1,
        "social_links": 1,
    }
    r = party.admin.delete("/v1/users/ann")
    assert r.json() == {"external_id": "ann", "interactions_deleted": 1, "social_links_deleted": 1,
                        "artifacts_rewritten": [], "runs_reset": []}
    assert party.admin.get("/v1/users/ann").status_code == 404
    before = snapshot(party.engine)
    r = party.admin.delete("/v1/users/ann")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert snapshot(party.engine) == before
    assert party.admin.get("/v1/counts").json()["users"] == 1


def test_openapi_contract(party: Party) -> None:
    spec = httpx.get(f"{party.url}/openapi.json").json()
    ids = set()
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            assert op["tags"] and op["description"], (path, method)
            assert op["operationId"] == f"{op['tags'][0]}-{op['operationId'].split('-', 1)[1]}"
            ids.add(op["operationId"])
    assert {
        "ingest-bulk_interactions",
        "users-erase_user",
        "summary-get_summary",
        "health-readiness",
    } <= ids
    bulk = spec["paths"]["/v1/interactions/bulk"]["post"]
    # CSV is the declared (streamed, binary) body generated clients send; NDJSON is documented beside it.
    assert bulk["requestBody"]["content"]["text/csv"]["schema"] == {"type": "string", "format": "binary"}
    assert "application/x-ndjson" in bulk["requestBody"]["description"]
    assert {"AdminToken", "CoordinatorToken", "ApiKey"} <= set(
        spec["components"]["securitySchemes"]
    )


def test_concurrent_bulk_uploads_are_serialised_and_both_stored(party: Party) -> None:
    bodies = [csv_body([(f"{tag}{k}", f"i{k % 40}", 3, k) for k in range(20_000)]) for tag in "ab"]
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                party.admin.post,
                "/v1/interactions/bulk",
                content=_chunks(b, 4_096),
                headers={"Content-Type": "text/csv"},
            )
            for b in bodies
        ]
        statuses = [f.result().status_code for f in futures]
    assert statuses == [200, 200]
    assert party.admin.get("/v1/counts").json()["interactions"] == 40_000
