"""P5: at a party with PARTY_WORKERS=2 the API workers forward `DELETE /v1/users/{id}` to the federation
process, and the forwarding route demanded the admin token: the coordinator's federation-wide erasure
(its own credential) got 403, was reported `unavailable`, and the user stayed. The forwarding route now
takes the admin token or the coordinator's credential, as the route it forwards to does.
Real `python -m party_api` process with two API workers and a federation process."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import ADMIN, COORD_TOKEN, Proc, party_proc

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("p5", tmp_path_factory.mktemp("p5"), workers=2).start(timeout=600)  # workers import slowly on a busy machine
    try:
        yield proc
    finally:
        proc.stop()


def test_the_coordinator_credential_erases_through_an_api_worker(party: Proc) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=party.url, timeout=30) as c:
        rows = {"rows": [{"user_id": "victim", "item_id": "i1", "rating": 4},
                         {"user_id": "other", "item_id": "i1", "rating": 3}]}
        assert c.post("/v1/interactions", json=rows, headers=admin).status_code == 200
        assert c.get("/v1/users/victim", headers=admin).status_code == 200
        erased = c.delete("/v1/users/victim", headers={"Authorization": f"Bearer {COORD_TOKEN}"})
        assert erased.status_code == 200, erased.text
        assert c.get("/v1/users/victim", headers=admin).status_code == 404
        assert c.get("/v1/users/other", headers=admin).status_code == 200


def test_other_credentials_still_cannot_erase(party: Proc) -> None:
    with httpx.Client(base_url=party.url, timeout=30) as c:
        assert c.delete("/v1/users/other", headers={"Authorization": "Bearer " + "x" * 43}).status_code == 403
        assert c.delete("/v1/users/other").status_code == 401
        assert c.get("/v1/users/other", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200
