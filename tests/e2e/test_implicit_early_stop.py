"""A federation whose parties all record implicit feedback (no ratings, so no validation RMSE): its run stops
early on the pooled validation NDCG@10, keeps the best NDCG round, and its release carries that figure."""

from __future__ import annotations

from pathlib import Path

from cli.localfed import ADMIN
from tests.support.federation import TINY_CONFIG, federation

PATIENCE, RANK_PATIENCE, CAP = 2, 3, 400  # the ranking figure's own patience decides, not `patience`
CONFIG = {**TINY_CONFIG, "rank_weight": 1.0, "rank_dims": 1, "patience": PATIENCE, "rank_patience": RANK_PATIENCE}


def test_an_all_implicit_run_stops_early_on_validation_ndcg(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2, party={"feedback": "implicit"}) as fed:
        run = fed.client.create_run(rounds=CAP, min_parties=2, config=CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300, poll_s=0.2)
        release = fed.http.get(f"{fed.coordinator.url}/v1/releases/release-1",
                               headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert status["state"] == "completed" and "stopped early" in status["detail"], status["detail"]
    rounds = [r["metrics"] for r in status["rounds"]]
    assert all("valid_rmse" not in m and 0.0 <= m["valid_ndcg@10"] <= 1.0 for m in rounds), rounds
    ndcg = [m["valid_ndcg@10"] for m in rounds]
    best = ndcg.index(max(ndcg))
    assert status["rounds_done"] == best + RANK_PATIENCE + 1 < CAP  # stopped at the first stall
    # the release holds the best NDCG round (kept at every party) and is gated on that figure alone
    assert release["state"] == "active" and release["round_index"] == best, release
    assert release["valid_rmse"] is None and release["valid_ndcg"] == ndcg[best]
