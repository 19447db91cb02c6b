"""A federation of one (issue 34, item 5): a single party process runs the protocol alone through the product
(no key agreement, no masking; the same PSI, model, rounds, release and serving), with secure aggregation left
on in its settings, so its local baseline comes from the product."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.localfed import ADMIN, API_KEY, party_proc
from tests.support.federation import TINY_CONFIG, process_federation, tiny_parties

pytestmark = [pytest.mark.slow]


def test_one_party_runs_alone_completes_and_serves(tmp_path: Path) -> None:
    datasets = {"p0": tiny_parties(2)["p0"]}
    config = {**TINY_CONFIG, "rank_weight": 1.0, "rank_dims": 1}
    assert "secure_aggregation" not in config  # the coordinator's default: on
    with process_federation(tmp_path, datasets, party=lambda pid, at: party_proc(pid, at),
                            coordinator_env={"COORD_PAUSE_POLL_S": "0.2", "COORD_WAIT_DEADLINE_S": "60",
                                             "COORD_FANOUT_TIMEOUT_S": "20"}) as fed:
        run = fed.client.create_run(rounds=4, min_parties=1, party_ids=["p0"], seed=0, config=config)
        status = fed.client.wait(run["run_id"], timeout=300)
        assert status["state"] == "completed", status["detail"]
        assert status["rounds_done"] == 4 and status["party_ids"] == ["p0"] and status["config"]["secure_aggregation"]
        assert all(r["participants"] == ["p0"] for r in status["rounds"])
        assert "release-1 active" in status["detail"], status["detail"]
        user = str(datasets["p0"].train.user_ids[0])
        http = fed.client.http
        party = http.get(f"{fed.parties['p0'].url}/v1/users/{user}/recommendations", params={"k": 5},
                         headers={"X-API-Key": API_KEY})
        merged = http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", params={"k": 5},
                          headers={"X-API-Key": API_KEY})
        release = http.get(f"{fed.coordinator.url}/v1/releases/release-1",
                           headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert party.status_code == merged.status_code == 200, (party.text, merged.text)
    assert party.json()["release_id"] == merged.json()["release_id"] == "release-1"
    assert [it["item_id"] for it in merged.json()["items"]] == [it["item_id"] for it in party.json()["items"]]
    assert release["state"] == "active" and release["party_ids"] == ["p0"]
