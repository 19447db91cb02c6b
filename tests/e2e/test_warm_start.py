"""Warm start over live HTTP: run 1 → release 1; more ratings (a new user, a new item); a warm run 2 starts
from release 1's parameters and completes; refusals without an active release or with another architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli.localfed import ADMIN, COORD_TOKEN
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG, Federation, federation

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
AS_COORDINATOR = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}


def _post_run(fed: Federation, **body: Any) -> Any:
    return fed.http.post(f"{fed.coordinator.url}/v1/runs", headers=ADMIN_H,
                         json={"min_parties": 2, "seed": 4, "config": TINY_CONFIG, **body})


def _completed(fed: Federation, run: dict[str, Any]) -> dict[str, Any]:
    status = fed.client.wait(run["run_id"], timeout=300, poll_s=0.2)
    assert status["state"] == "completed", status["detail"]
    return status


def _ingest_more(fed: Federation) -> None:
    """A user new to every party (so PSI aligns them), an item new at p0, and more ratings of known users."""
    for k, (pid, live) in enumerate(fed.parties.items()):
        ds = fed.datasets[pid]
        items = [str(i) for i in ds.train.item_ids[:3].tolist()]
        users = sorted({str(u) for u in ds.train.user_ids.tolist()})[::6]
        rows = [{"user_id": "user-new", "item_id": i, "rating": 4.0} for i in items]
        rows += [{"user_id": u, "item_id": items[(j + k) % 3], "rating": 3.0} for j, u in enumerate(users)]
        if pid == "p0":
            rows += [{"user_id": u, "item_id": "item-new", "rating": 5.0} for u in users[:4]]
        resp = fed.http.post(f"{live.url}/v1/interactions", json={"rows": rows}, headers=ADMIN_H)
        assert resp.status_code == 200, resp.text


def test_warm_run_starts_from_the_active_release(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        refused = _post_run(fed, warm_start=True)
        assert refused.status_code == 409 and refused.json()["code"] == "warm_start_refused", refused.text
        assert "none is active" in refused.json()["detail"] and refused.json()["field"] == "warm_start"

        first = _completed(fed, _post_run(fed, rounds=25).json())
        release = fed.http.get(f"{fed.coordinator.url}/v1/releases/release-1", headers=ADMIN_H).json()
        assert release["state"] == "active" and release["warm_start_from"] is None, release
        # the release holds the run's best validation round (every party kept it), not its last
        best = min((r["metrics"]["valid_rmse"], r["round_index"]) for r in first["rounds"])
        trained_rmse = release["metrics"].get("valid_rmse_trained", release["valid_rmse"])  # the round's own figure
        assert (trained_rmse, release["round_index"]) == best, (release, best)
        other_round = next(t for t in range(1, 25) if t not in (best[1], first["rounds_done"] - 1))
        stale = fed.http.post(f"{fed.parties['p0'].url}/v1/federation/runs/{first['run_id']}/publish",
                              json={"round_index": other_round}, headers=AS_COORDINATOR)
        assert stale.status_code == 409 and "nor one it kept" in stale.json()["detail"], stale.text
        _ingest_more(fed)

        other = _post_run(fed, warm_start=True, config={**TINY_CONFIG, "dim": 6})
        assert other.status_code == 409 and "dim 4 → 6" in other.json()["detail"], other.text

        created = _post_run(fed, warm_start=True, rounds=4)
        assert created.status_code == 202 and created.json()["warm_start_from"] == "release-1", created.text
        assert created.json()["config"]["reg_warmup"] == 0  # warm embeddings need no L2 warm-up
        second = _completed(fed, created.json())
        assert second["n_users"] == first["n_users"] + 1  # the new user is aligned (a fresh row)
        releases = {r["release_id"]: r for r in
                    fed.http.get(f"{fed.coordinator.url}/v1/releases", headers=ADMIN_H).json()}
        assert releases["release-2"]["run_id"] == second["run_id"]
        assert releases["release-2"]["warm_start_from"] == "release-1"

    cold_first = first["rounds"][0]["metrics"]["valid_rmse"]
    warm_first = second["rounds"][0]["metrics"]["valid_rmse"]
    trained = release["metrics"].get("valid_rmse_trained", release["valid_rmse"])
    # the warm run's first forward is release 1's model (on slightly more data), far from a cold first round
    assert cold_first - trained > 0.1, (cold_first, trained)
    assert abs(warm_first - trained) < 0.2 * (cold_first - trained), (cold_first, warm_first, trained)
