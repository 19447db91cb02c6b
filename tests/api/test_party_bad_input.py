"""Bad input over real HTTP: a clear 4xx naming the row and reason, and the database unchanged."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import pytest

from tests.support.databases import snapshot
from tests.support.party import ADMIN, Party, csv_body

CSV = {"Content-Type": "text/csv"}
NDJSON = {"Content-Type": "application/x-ndjson"}


def seed(party: Party) -> dict[str, list[tuple[object, ...]]]:
    """Store one committed row, then return the snapshot every rejection must preserve."""
    party.admin.post(
        "/v1/interactions/bulk", content=csv_body([("u0", "i0", 3, 1)]), headers=CSV
    ).raise_for_status()
    return snapshot(party.engine)


def refused(party: Party, path: str, status: int = 422, **kwargs: object) -> dict[str, object]:
    """POST, assert the status, the {code, detail} body and an unchanged database."""
    before = seed(party)
    response = party.admin.post(path, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    body: dict[str, object] = response.json()
    assert body["code"] and body["detail"]
    assert snapshot(party.engine) == before
    return body


def test_one_bad_row_among_10000_good_ones(party: Party) -> None:
    rows = [(f"u{k}", f"i{k % 50}", 1 + k % 5, k) for k in range(10_001)]
    rows[9_000] = ("u9000", "i0", 6, 9_000)
    body = refused(party, "/v1/interactions/bulk", content=csv_body(rows), headers=CSV)
    assert body["code"] == "validation_failed"
    assert body["errors"] == [{"row": 9_001, "field": "rating", "reason": "6.0 outside [1.0, 5.0]"}]
    assert "row 9001" in str(body["detail"])


@pytest.mark.parametrize(
    "content, field, reason",
    [
        (b"user_id,item_id,rating\nu1,i1,0.5\n", "rating", "0.5 outside [1.0, 5.0]"),
        (b"user_id,item_id,rating,genre\nu1,i1,4,x\n", "genre", "unknown column 'genre'"),
        (b"user_id,item_id,rating\nu1,i1\n", None, "expected 3 fields, got 2"),
        (b'user_id,item_id,rating\nu1,"i1,4\n', None, "malformed CSV"),
        (b"user_id,item_id,rating\nu1,i1,four\n", "rating", "'four' is not a number"),
        (b"user_id,item_id,rating\nu1,i1,4\nu1,i1,5\n", None, "also on row 1"),
        (b"user_id,item_id,rating\nu1,i1,4\n\xff\n", None, "not valid UTF-8"),
        (b"", None, "empty body"),
    ],
)
def test_bad_csv_is_refused(party: Party, content: bytes, field: str | None, reason: str) -> None:
    body = refused(party, "/v1/interactions/bulk", content=content, headers=CSV)
    errors = body["errors"]
    assert isinstance(errors, list) and errors[0]["field"] == field
    assert reason in errors[0]["reason"]


def test_bad_ndjson_and_links(party: Party) -> None:
    body = refused(
        party,
        "/v1/interactions/bulk",
        headers=NDJSON,
        content=b'{"user_id": "a", "item_id": "b", "rating": 2}\n{"user_id": "a", "item_id": "c"}\n',
    )
    assert body["errors"] == [
        {"row": 2, "field": "rating", "reason": "missing required field 'rating'"}
    ]
    body = refused(
        party,
        "/v1/social-links/bulk",
        headers=CSV,
        content=b"src_user_id,dst_user_id,weight\na,b,1\nb,c,-1\n",
    )
    assert body["errors"] == [{"row": 2, "field": "weight", "reason": "-1.0 outside [0.0, inf]"}]


def test_bad_json_batches(party: Party) -> None:
    rows = [
        {"user_id": "a", "item_id": "b", "rating": 3},
        {"user_id": "a", "item_id": "c", "rating": 3, "x": 1},
    ]
    body = refused(party, "/v1/interactions", json={"rows": rows})
    assert body["errors"][0]["row"] == 2 and body["errors"][0]["field"] == "x"  # type: ignore[index]
    rows = [
        {"user_id": "a", "item_id": "b", "rating": 3},
        {"user_id": "a", "item_id": "b", "rating": 4},
    ]
    body = refused(party, "/v1/interactions", json={"rows": rows})
    assert body["errors"][0]["row"] == 2 and "also on row 1" in body["errors"][0]["reason"]  # type: ignore[index]
    body = refused(
        party, "/v1/interactions", json={"rows": [{"user_id": "a", "item_id": "b", "rating": 9}]}
    )
    assert body["errors"] == [{"row": 1, "field": "rating", "reason": "9.0 outside [1.0, 5.0]"}]


def test_unsupported_media_type(party: Party) -> None:
    body = refused(
        party,
        "/v1/interactions/bulk",
        status=415,
        content=b"user_id,item_id,rating\nu,i,3\n",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert body["code"] == "unsupported_media_type"


def test_client_disconnect_mid_upload_stores_nothing(party: Party) -> None:
    before = seed(party)
    rows = csv_body([(f"u{k}", f"i{k}", 3, k) for k in range(20_000)])
    host = urlparse(party.url)
    with socket.create_connection((host.hostname, host.port)) as sock:
        head = (
            f"POST /v1/interactions/bulk HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
            f"Content-Type: text/csv\r\nContent-Length: {len(rows) * 2}\r\n\r\n"
        )
        sock.sendall(head.encode() + rows)  # half of the announced body, then hang up
        time.sleep(0.5)
    assert snapshot(party.engine) == before
    # The aborted request must have released SQLite's write lock and stored none of its rows.
    r = party.admin.post(
        "/v1/interactions/bulk", content=csv_body([("u5", "i5", 5, 1)]), headers=CSV
    )
    assert r.status_code == 200 and party.admin.get("/v1/counts").json()["interactions"] == 2
