"""N4: the coordinator's HTTP client logged every fan-out URL with the raw user id (httpx's INFO line),
an erased user's id included; now neither service's log holds the id after a fan-out and an erasure."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx

from cli.localfed import ADMIN, API_KEY, COORD_TOKEN, coordinator_proc, party_proc

USER = "bob-" + secrets.token_hex(6)


def test_fanout_and_erasure_leave_no_user_id_in_the_logs(tmp_path: Path) -> None:
    party, coord = party_proc("p1", tmp_path), coordinator_proc(tmp_path)
    party.start()
    coord.start()
    try:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        rows = {"rows": [{"user_id": USER, "item_id": "i1", "rating": 4}]}
        assert httpx.post(f"{party.url}/v1/interactions", headers=admin, json=rows).status_code == 200
        body = {"party_id": "p1", "url": party.url, "token": COORD_TOKEN}
        assert httpx.post(f"{coord.url}/v1/parties", headers=admin, json=body).status_code == 201
        key = {"X-API-Key": API_KEY}
        first = httpx.get(f"{coord.url}/v1/users/{USER}/recommendations", headers=key, timeout=30)
        # no model yet at the party: its own model_not_ready comes back through the fan-out
        assert first.status_code == 409 and first.json()["code"] == "model_not_ready", first.text
        erased = httpx.delete(f"{coord.url}/v1/users/{USER}", headers=admin, timeout=30)  # erasure at every party
        assert erased.status_code == 200, erased.text
        assert httpx.get(f"{party.url}/v1/users/{USER}", headers=admin).status_code == 404
        httpx.get(f"{coord.url}/v1/users/{USER}/recommendations", headers=key, timeout=30)
    finally:
        time.sleep(0.2)  # the last log lines reach the files
        coord.stop()
        party.stop()
    coord_log, party_log = coord.log.read_text(), party.log.read_text()
    assert coord_log.count("/v1/users/u:") >= 2  # the fan-outs were logged (access lines, hashed ids) ...
    assert USER not in coord_log  # ... and no client line carries the id
    assert USER not in party_log
