"""Runs that never hang: pre-flight, parties left out with their reason, too few common users, `fedrec coordinator check`."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from cli.main import app
from services.data.types import Dataset, Ratings
from tests.support.federation import ADMIN, TINY_CONFIG, federation, tiny_parties


def _renamed(ds: Dataset, prefix: str) -> Dataset:
    """The same interactions under other user ids (no user in common with anyone)."""
    def r(x: Ratings) -> Ratings:
        return Ratings(np.array([prefix + str(u) for u in x.user_ids.tolist()], dtype=object), x.item_ids, x.ratings,
                       x.timestamps)
    return replace(ds, train=r(ds.train), test=r(ds.test), valid=r(ds.valid) if ds.valid is not None else None)


def test_parties_without_common_users_fail_within_seconds_with_the_reason(tmp_path: Path) -> None:
    parts = tiny_parties(2)
    parts["p1"] = _renamed(parts["p1"], "zine-")
    with federation(tmp_path, datasets=parts) as fed:
        started = time.monotonic()
        run = fed.client.create_run(rounds=5, min_parties=2, seed=1, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=60)
        elapsed = time.monotonic() - started
    assert status["state"] == "failed" and elapsed < 60
    assert "p0 and p1 have 0 users in common" in status["detail"] and "COORD_MIN_COMMON_USERS" in status["detail"]


def test_an_unreachable_registered_party_is_left_out_and_the_run_completes(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        fed.client.register("ghost", "http://127.0.0.1:9")  # registered and enabled, nothing listens there
        run = fed.client.create_run(rounds=2, min_parties=2, seed=1, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=120)
        checked = fed.http.post(f"{fed.coordinator.url}/v1/parties/check", headers={"Authorization": f"Bearer {ADMIN}"})
        result = CliRunner().invoke(app, ["coordinator", "check", "--url", fed.coordinator.url, "--token", ADMIN])
    assert status["state"] == "completed", status["detail"]
    assert status["party_ids"] == ["p0", "p1"] and all(r["participants"] == ["p0", "p1"] for r in status["rounds"])
    assert status["excluded"]["ghost"].startswith("pre-flight: unreachable at http://127.0.0.1:9")
    rows = {r["party_id"]: r for r in checked.json()}
    assert rows["p0"]["ok"] and rows["p1"]["ok"] and not rows["ghost"]["ok"] and "unreachable" in rows["ghost"]["reason"]
    assert result.exit_code == 1 and "ghost" in result.output and "unreachable" in result.output


def test_below_min_parties_after_pre_flight_the_run_fails_at_once(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        fed.client.register("ghost", "http://127.0.0.1:9")
        fed.http.patch(f"{fed.coordinator.url}/v1/parties/p1", json={"enabled": False},
                       headers={"Authorization": f"Bearer {ADMIN}"}).raise_for_status()
        started = time.monotonic()
        run = fed.client.create_run(rounds=2, min_parties=2, seed=1, config=TINY_CONFIG,
                                    party_ids=["p0", "p1", "ghost"])
        status = fed.client.wait(run["run_id"], timeout=60)
    assert status["state"] == "failed" and time.monotonic() - started < 30
    assert "1 of 3 parties can take part, min_parties=2" in status["detail"]
    assert "p1 pre-flight: disabled" in status["detail"] and "ghost pre-flight: unreachable" in status["detail"]


def test_a_wrong_credential_is_named_by_the_pre_flight(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        fed.http.patch(f"{fed.coordinator.url}/v1/parties/p1", json={"token": "w" * 40},
                       headers={"Authorization": f"Bearer {ADMIN}"}).raise_for_status()
        rows = fed.http.post(f"{fed.coordinator.url}/v1/parties/check",
                             headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert {r["party_id"]: r["reason"] for r in rows}["p1"].startswith("refused the coordinator's credential")
