"""N7: each party sets its own floor on ε (PARTY_DP_MIN_EPSILON) and cap on released ratings
(PARTY_DP_MAX_RELEASED); configure beyond them is refused with the reason, before anything is sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.localfed import ADMIN, COORD_TOKEN
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG, Federation, federation


def _cancel(fed: Federation, run_id: str) -> None:
    answer = fed.http.post(f"{fed.coordinator.url}/v1/runs/{run_id}/cancel", headers={"Authorization": f"Bearer {ADMIN}"})
    assert answer.status_code == 202, answer.text
    fed.client.wait(run_id, until=("cancelled",), timeout=60)


@pytest.mark.slow
def test_parties_refuse_runs_beyond_their_dp_limits(tmp_path: Path) -> None:
    # ~800 ratings per party over 60 users x ~45 items: at ε = 8 about 800 ratings are released
    with federation(tmp_path, n_parties=2, party={"dp_min_epsilon": 4.0, "dp_max_released": 500}) as fed:
        # The coordinator's run ends failed at configuration with each party's reason (a refusal is not retried).
        low = fed.client.create_run(rounds=1, min_parties=2, seed=0, config={**TINY_CONFIG, "dp_epsilon": 2})
        status = fed.client.wait(low["run_id"], timeout=120)
        assert status["state"] == "failed", status
        assert "below this party's minimum 4 (PARTY_DP_MIN_EPSILON)" in status["detail"], status["detail"]

        # FedPerGNN nests its ε under `train`: the floor reads it through the protocol's plan (issue 41: a run
        # with train.dp_epsilon = 2 used to complete at parties whose floor is 4)
        nested = fed.client.create_run(rounds=1, min_parties=2, seed=0,
                                       config={"protocol": "fedpergnn", "train": {"dim": 4, "dp_epsilon": 2}})
        status = fed.client.wait(nested["run_id"], timeout=120)
        assert status["state"] == "failed", status
        assert "below this party's minimum 4 (PARTY_DP_MIN_EPSILON)" in status["detail"], status["detail"]

        many = fed.client.create_run(rounds=1, min_parties=2, seed=0, config={**TINY_CONFIG, "dp_epsilon": 8})
        status = fed.client.wait(many["run_id"], timeout=120)
        assert status["state"] == "failed", status
        assert "over this party's maximum 500 (PARTY_DP_MAX_RELEASED)" in status["detail"], status["detail"]

        # The party's own answer (the run is aligned, so only the policy stands in the way): 403 naming the field.
        answer = fed.http.post(f"{fed.parties['p0'].url}/v1/federation/runs/{many['run_id']}/configure",
                               json={"run_id": many["run_id"], "config": {**TINY_CONFIG, "dp_epsilon": 8}, "seed": 0},
                               headers={"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION})
        body = answer.json()
        assert answer.status_code == 403 and body["code"] == "policy_refused", body
        assert body["field"] == "config.dp_epsilon" and body["max_released"] == 500 and body["expected_released"] > 500

        # Within both limits (no DP at all here) the same parties train.
        plain = fed.client.create_run(rounds=1, min_parties=2, seed=0, config=TINY_CONFIG)
        assert fed.client.wait(plain["run_id"], timeout=180)["state"] == "completed"
