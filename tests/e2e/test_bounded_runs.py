"""The operator's second walk over real processes (issue 34): two party processes and a coordinator process.

In order, on one federation: before any publish the coordinator answers model_not_ready as a party does;
evaluation labels of pairs a party does not hold are refused (or, asked to, skipped) and the run then reports
test figures of its served round; a cancelled run and a timed-out run each publish their best round; a cancel
told not to publish publishes nothing; warm runs and a cold run score the same validation pairs (carved once,
kept at the parties) and retention keeps the way back; the RMSE preset carves validation, stops early and is
released.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY, CoordinatorClient, Proc, party_proc
from services.db.session import make_engine
from services.party import fed_store
from services.verfedgnn.types import SPLIT_CODES
from tests.support.federation import TINY_CONFIG, process_federation, tiny_parties

pytestmark = [pytest.mark.slow]
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
# no validation labels of their own: the run's valid_fraction carves them (the tuned-ranking preset's 0.1)
# (patience past any run here: only the cap, the time bound or a cancel ends these runs)
CONFIG = {**TINY_CONFIG, "rank_weight": 1.0, "rank_dims": 1, "valid_fraction": 0.2, "patience": 100_000}


@dataclass
class Fed:
    """The running processes and clients."""

    parties: dict[str, Proc]
    coordinator: Proc
    client: CoordinatorClient
    root: Path
    http: httpx.Client


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    root = tmp_path_factory.mktemp("walk")
    datasets = {p: replace(d, valid=None) for p, d in tiny_parties(2).items()}
    with process_federation(root, datasets, party=lambda pid, at: party_proc(pid, at),
                            coordinator_env={"COORD_PAUSE_POLL_S": "0.2", "COORD_RELEASES_KEEP": "2",
                                             "COORD_FANOUT_TIMEOUT_S": "20",  # a loaded machine's first connection
                                             # a wide RMSE tolerance: the NDCG@10 comparison decides the gate
                                             "COORD_RELEASE_TOLERANCE": "5.0",
                                             "COORD_RELEASE_NDCG_TOLERANCE": "0.02"}) as pf:
        with httpx.Client(timeout=60) as http:
            yield Fed(pf.parties, pf.coordinator, pf.client, root, http)


def _fedrec(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=300,
                          check=False)


def _release(fed: Fed, release_id: str) -> dict[str, Any]:
    return dict(fed.http.get(f"{fed.coordinator.url}/v1/releases/{release_id}", headers=ADMIN_H).json())


def _releases(fed: Fed) -> dict[str, dict[str, Any]]:
    return {r["release_id"]: r for r in fed.http.get(f"{fed.coordinator.url}/v1/releases", headers=ADMIN_H).json()}


def _valid_pairs(fed: Fed, pid: str) -> set[tuple[str, str]]:
    """The validation pairs a party stores (its carve, kept)."""
    engine = make_engine(f"sqlite:///{fed.root / pid / 'party.db'}")
    try:
        with Session(engine) as s:
            labels = fed_store._labels(s)
    finally:
        engine.dispose()
    return {k for k, c in labels.items() if c == SPLIT_CODES["valid"]}


def _best_round(status: dict[str, Any]) -> int:
    ndcg = [(r["metrics"]["valid_ndcg@10"], -r["round_index"]) for r in status["rounds"]]
    return -max(ndcg)[1]  # the first round with the best figure


def test_before_any_publish_the_coordinator_says_model_not_ready(fed: Fed) -> None:
    party = fed.http.get(f"{fed.parties['p0'].url}/v1/users/user-1/recommendations", headers={"X-API-Key": API_KEY})
    coord = fed.http.get(f"{fed.coordinator.url}/v1/users/user-1/recommendations", headers={"X-API-Key": API_KEY})
    assert party.status_code == coord.status_code == 409, coord.text
    assert party.json()["code"] == coord.json()["code"] == "model_not_ready", coord.json()


def test_evaluation_labels_of_pairs_a_party_does_not_hold(fed: Fed, tmp_path: Path) -> None:
    url = fed.parties["p0"].url
    held = next(iter(fed_store_pairs(fed, "p0")))
    test_file = tmp_path / "test.csv"
    test_file.write_text(f"user_id,item_id\n{held[0]},{held[1]}\nuser-1,item-not-here\n")
    before = _labels_of(fed, "p0")
    done = _fedrec("party", "evaluation-split", str(test_file), "--url", url, "--token", ADMIN)
    assert done.returncode == 1 and done.stdout.count("\n") + done.stderr.count("\n") == 1, (done.stdout, done.stderr)
    assert "1 of 2 pairs are not stored at this party" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and _labels_of(fed, "p0") == before  # refused: nothing changed
    done = _fedrec("party", "evaluation-split", str(test_file), "--url", url, "--token", ADMIN, "--held-only")
    assert done.returncode == 0 and '"rows": 1' in done.stdout and '"skipped_not_held": 1' in done.stdout, done.stdout
    # put the loaded test labels back (the fixture's own, all held)
    rows = [{"user_id": u, "item_id": i, "split": "test"} for (u, i), c in before.items() if c == SPLIT_CODES["test"]]
    assert fed.http.put(f"{url}/v1/evaluation-split", json={"rows": rows}, headers=ADMIN_H).status_code == 200


def test_a_cancelled_run_publishes_its_best_round_and_says_it_is_served(fed: Fed) -> None:
    run = fed.client.create_run(rounds=500, min_parties=2, seed=1, config=CONFIG)
    fed.client.wait(run["run_id"], rounds_done=4, timeout=300)
    progress = fed.client.run(run["run_id"])["detail"]
    assert "best validation round" in progress and "min left" in progress, progress
    cancelled = fed.http.post(f"{fed.coordinator.url}/v1/runs/{run['run_id']}/cancel", headers=ADMIN_H, json={})
    assert cancelled.status_code == 202
    status = fed.client.wait(run["run_id"], timeout=300)
    assert status["state"] == "cancelled" and "release-1" in status["detail"], status["detail"]
    release = _release(fed, "release-1")
    best = _best_round(status)
    assert release["run_id"] == run["run_id"] and release["round_index"] == best and release["state"] == "active"
    # the headline figures are the served round's, and say so; test figures come from the held labels
    served = status["rounds"][best]["metrics"]
    assert f"served round {best}: pooled validation NDCG@10 {served['valid_ndcg@10']:.4f}" in status["detail"]
    assert f"test RMSE {served['test_rmse']:.4f}" in status["detail"], status["detail"]
    first = {p: _valid_pairs(fed, p) for p in fed.parties}
    assert all(first.values())  # the run carved validation pairs at each party and kept them
    fed.first_carve = first  # type: ignore[attr-defined]


def test_a_run_past_its_time_bound_stops_and_publishes_its_best_round(fed: Fed) -> None:
    run = fed.client.create_run(rounds=100_000, min_parties=2, seed=2, config=CONFIG, max_minutes=0.15)
    status = fed.client.wait(run["run_id"], timeout=600)
    assert status["state"] == "completed" and "time bound" in status["detail"], status["detail"]
    assert 0 < status["rounds_done"] < 100_000
    release = next(r for r in _releases(fed).values() if r["run_id"] == run["run_id"])
    assert release["round_index"] == _best_round(status)
    assert release["state"] in ("active", "staged") and release["release_id"] in status["detail"]


def test_a_cancel_told_not_to_publish_publishes_nothing(fed: Fed) -> None:
    before = set(_releases(fed))
    run = fed.client.create_run(rounds=500, min_parties=2, seed=3, config=CONFIG)
    fed.client.wait(run["run_id"], rounds_done=2, timeout=300)
    fed.http.post(f"{fed.coordinator.url}/v1/runs/{run['run_id']}/cancel", headers=ADMIN_H, json={"publish": False})
    status = fed.client.wait(run["run_id"], timeout=300)
    assert status["state"] == "cancelled" and set(_releases(fed)) == before


def test_warm_runs_and_a_cold_run_compare_on_the_same_validation_pairs(fed: Fed) -> None:
    first = fed.first_carve  # type: ignore[attr-defined]
    active = next(r for r in _releases(fed).values() if r["state"] == "active")
    for seed in (4, 5):
        run = fed.client.create_run(rounds=2, min_parties=2, seed=seed, config=CONFIG, warm_start=True)
        assert fed.client.wait(run["run_id"], timeout=300)["state"] == "completed"
    # a cold run of one round after the warm ones: scored on the very same validation pairs
    cold = fed.client.create_run(rounds=1, min_parties=2, seed=9, config=CONFIG)
    assert fed.client.wait(cold["run_id"], timeout=300)["state"] == "completed"
    assert {p: _valid_pairs(fed, p) for p in fed.parties} == first
    listed = _releases(fed)
    now = next(r for r in listed.values() if r["state"] == "active")
    # retention (COORD_RELEASES_KEEP=2) never prunes the active release nor the one served before it
    ever = [r for r in listed.values() if r["state"] in ("active", "retired") and r["activated_at"]]
    assert now["state"] == "active" and active["release_id"] in listed
    if len(ever) > 1:
        back = max((r for r in ever if r["state"] == "retired"), key=lambda r: r["activated_at"])
        rolled = fed.http.post(f"{fed.coordinator.url}/v1/releases/{back['release_id']}/activate", headers=ADMIN_H,
                               json={})
        assert rolled.status_code == 200 and rolled.json()["state"] == "active", rolled.text
    else:  # every later release was held: the first one still serves
        assert now["release_id"] == active["release_id"]


def test_the_rmse_preset_carves_validation_stops_early_and_is_released(fed: Fed) -> None:
    run = fed.client.create_run(preset="tuned", rounds=400, min_parties=2, seed=7,
                                config={"dim": 4, "patience": 2})
    assert run["config"]["valid_fraction"] > 0
    status = fed.client.wait(run["run_id"], timeout=600)
    assert status["state"] == "completed" and "stopped early" in status["detail"], status["detail"]
    rmse = [r["metrics"]["valid_rmse"] for r in status["rounds"]]
    assert all(math.isfinite(v) for v in rmse) and status["rounds_done"] < 400
    release = next(r for r in _releases(fed).values() if r["run_id"] == run["run_id"])
    trained = release["metrics"].get("valid_rmse_trained", release["valid_rmse"])  # the round's own figure
    assert release["round_index"] == rmse.index(min(rmse)) and trained == min(rmse)
    assert release["valid_rmse"] <= trained  # the gate's figure: served, with the parties' rating components


def test_the_cli_shows_left_out_parties_and_readable_status(fed: Fed) -> None:
    from cli.localfed import free_port

    fed.client.register("p9", f"http://127.0.0.1:{free_port()}")  # nothing listens there: pre-flight leaves it out
    try:
        url = fed.coordinator.url
        done = _fedrec("coordinator", "create", "--url", url, "--token", ADMIN, "--party-ids", "p0,p1,p9",
                       "--rounds", "1", "--config", json.dumps(CONFIG), "--wait", "--wait-timeout", "300")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "left out: p9: pre-flight:" in done.stdout, done.stdout
        run_id = done.stdout.split()[1]
        shown = _fedrec("coordinator", "status", run_id, "--url", url, "--token", ADMIN)
        assert shown.returncode == 0 and "left out: p9: pre-flight:" in shown.stdout, shown.stdout
        assert "bytes_sent" not in shown.stdout and re.search(r"p0\s+\S+\s+\d+(\.\d)? (B|kB|MB)", shown.stdout)
    finally:
        fed.http.delete(f"{fed.coordinator.url}/v1/parties/p9", headers=ADMIN_H)


def fed_store_pairs(fed: Fed, pid: str) -> set[tuple[str, str]]:
    engine = make_engine(f"sqlite:///{fed.root / pid / 'party.db'}")
    try:
        with Session(engine) as s:
            return fed_store.stored_pairs(session=s)
    finally:
        engine.dispose()


def _labels_of(fed: Fed, pid: str) -> dict[tuple[str, str], int]:
    engine = make_engine(f"sqlite:///{fed.root / pid / 'party.db'}")
    try:
        with Session(engine) as s:
            return fed_store._labels(s)
    finally:
        engine.dispose()
