"""A party's publish answer under whole-run DP, over live HTTP (issue 39, Q4).

With `dp_epsilon` set, a party's validation figures (the served model's error sum and count, NDCG@10 per
slice) come from held-out ratings the randomized response does not cover: the party withholds them and says
why, and the coordinator's release, `fedrec release show` and the API say "withheld under DP" instead of a
figure. The same federation's run without DP gets them (so the tiny data does have figures to withhold).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.localfed import ADMIN, COORD_TOKEN
from cli.main import app
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG, Federation, federation

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
AS_COORDINATOR = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
ROUNDS = 2


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with federation(tmp_path_factory.mktemp("dp-publish"), n_parties=2) as f:
        yield f


def _completed(fed: Federation, config: dict[str, Any], *, seed: int) -> dict[str, Any]:
    # each run its own seed: the parties refuse to unmask a sum of values an earlier run already unmasked
    run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=seed, config=config)
    status = fed.client.wait(run["run_id"], timeout=300)
    assert status["state"] == "completed", status["detail"]
    return status


def _publish_answers(fed: Federation, run_id: str) -> dict[str, dict[str, Any]]:
    """Each party's publish answer for the run's last round, asked as the coordinator asks (staged, not served)."""
    out = {}
    for pid, party in sorted(fed.parties.items()):
        r = fed.http.post(f"{party.url}/v1/federation/runs/{run_id}/publish", headers=AS_COORDINATOR,
                          json={"round_index": ROUNDS - 1, "release_id": f"probe-{run_id}"})
        assert r.status_code == 200, r.text
        out[pid] = r.json()
    return out


def _release(fed: Federation, run_id: str) -> dict[str, Any]:
    r = fed.http.get(f"{fed.coordinator.url}/v1/releases", headers=ADMIN_H)
    assert r.status_code == 200, r.text
    (release,) = [x for x in r.json() if x["run_id"] == run_id]
    return release


def test_under_dp_a_party_publishes_no_validation_figures(fed: Federation) -> None:
    status = _completed(fed, {**TINY_CONFIG, "dp_epsilon": 8}, seed=0)
    for pid, answer in _publish_answers(fed, status["run_id"]).items():
        assert answer.get("valid_sse") is None and answer.get("valid_count") is None, (pid, answer)
        assert answer.get("value") == [], (pid, answer)
        assert "dp_epsilon" in (answer.get("withheld") or ""), (pid, answer)
    release = _release(fed, status["run_id"])
    assert release["valid_rmse"] is None and release["value_report"] is None, release
    assert set(release["value_withheld"]) == set(fed.parties), release
    result = CliRunner().invoke(app, ["release", "show", release["release_id"], "--url", fed.coordinator.url,
                                      "--token", ADMIN])
    assert result.exit_code == 0, result.output
    assert "withheld under DP" in result.output and "p0" in result.output, result.output


def test_without_dp_a_party_publishes_its_validation_figures(fed: Federation) -> None:
    status = _completed(fed, TINY_CONFIG, seed=1)
    answers = _publish_answers(fed, status["run_id"])
    for pid, answer in answers.items():
        assert answer["valid_count"] > 0 and answer["valid_sse"] >= 0, (pid, answer)
        assert answer.get("withheld") is None, (pid, answer)
    assert any(a["value"] for a in answers.values()), "no party had a value report: the DP check would mean little"
    release = _release(fed, status["run_id"])
    assert release["valid_rmse"] is not None and release["value_report"], release
    assert release.get("value_withheld") is None, release
