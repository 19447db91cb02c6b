"""POST /v1/users: registering customer ids without interactions (idempotent, validated, admin only, erasable)."""

from __future__ import annotations

import httpx

from tests.support.databases import snapshot
from tests.support.party import API_KEY, COORDINATOR, Party, csv_body


def test_register_counts_and_is_idempotent(party: Party) -> None:
    party.admin.post("/v1/interactions/bulk", content=csv_body([("ann", "i1", 4, 1)]),
                     headers={"Content-Type": "text/csv"}).raise_for_status()
    r = party.admin.post("/v1/users", json={"user_ids": ["new-1", 7, "ann", "new-1"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"users": 3, "created": 2, "existing": 1}  # a repeated id counts once; ann was known
    assert party.admin.get("/v1/counts").json()["users"] == 3
    assert party.admin.get("/v1/users/7").json() == {"external_id": "7", "interactions": 0, "social_links": 0}
    before = snapshot(party.engine)
    again = party.admin.post("/v1/users", json={"user_ids": ["7", "new-1"]})
    assert again.json() == {"users": 2, "created": 0, "existing": 2}
    assert snapshot(party.engine) == before  # re-registration changes no user row
    # Interactions of a registered user attach to the same row.
    party.admin.post("/v1/interactions", json={"rows": [{"user_id": "new-1", "item_id": "i1", "rating": 3}]})
    assert party.admin.get("/v1/users/new-1").json()["interactions"] == 1
    assert party.admin.get("/v1/counts").json()["users"] == 3


def test_bad_ids_are_refused_naming_the_field_and_nothing_is_stored(party: Party) -> None:
    before = snapshot(party.engine)
    for body, field, row in (({"user_ids": ["ok", "bad\x00id"]}, "user_ids", 2),
                             ({"user_ids": ["u" * 256]}, "user_ids", 1),
                             ({"user_ids": [""]}, "user_ids", 1),
                             ({"user_ids": [1.5]}, "user_ids", 1)):
        r = party.admin.post("/v1/users", json=body)
        assert r.status_code == 422, (body, r.text)
        err = r.json()
        assert err["code"] == "validation_failed" and err["field"] == field and err["errors"][0]["row"] == row
    for body in ({"user_ids": []}, {}, {"user_ids": ["a"], "extra": 1}):
        r = party.admin.post("/v1/users", json=body)
        assert r.status_code == 422 and r.json()["code"] == "validation_failed", (body, r.text)
    too_many = party.admin.post("/v1/users", json={"user_ids": [f"u{k}" for k in range(50_001)]})
    assert too_many.status_code in (413, 422), too_many.text
    assert snapshot(party.engine) == before


def test_registration_needs_the_admin_token(party: Party) -> None:
    body = {"user_ids": ["x"]}
    assert httpx.post(f"{party.url}/v1/users", json=body).status_code == 401
    assert httpx.post(f"{party.url}/v1/users", json=body, headers={"X-API-Key": API_KEY}).status_code == 401
    forbidden = httpx.post(f"{party.url}/v1/users", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"})
    assert forbidden.status_code == 403
    assert httpx.post(f"{party.url}/v1/users", json=body,
                      headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert party.admin.get("/v1/counts").json()["users"] == 0


def test_a_registered_user_without_interactions_is_erased(party: Party) -> None:
    party.admin.post("/v1/users", json={"user_ids": ["cold", "other"]}).raise_for_status()
    r = party.admin.delete("/v1/users/cold")
    assert r.status_code == 200 and r.json() == {"external_id": "cold", "interactions_deleted": 0,
                                                 "social_links_deleted": 0, "artifacts_rewritten": [],
                                                 "runs_reset": []}
    assert party.admin.get("/v1/users/cold").status_code == 404
    assert party.admin.get("/v1/counts").json()["users"] == 1
    # Registering the id again after erasure makes it a new, empty user.
    assert party.admin.post("/v1/users", json={"user_ids": ["cold"]}).json() == {"users": 1, "created": 1,
                                                                                "existing": 0}
