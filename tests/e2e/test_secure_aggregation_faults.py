"""Secure aggregation over real HTTP: one of three party processes is SIGKILLed in the middle of a masked round."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from cli.localfed import CoordinatorClient, Proc, coordinator_proc, load_party, party_proc, start_all
from tests.support.federation import TINY_CONFIG, tiny_parties

FAST_FAULTS = {"OMP_NUM_THREADS": "1", "COORD_MAX_RETRIES": "1", "COORD_RETRY_BACKOFF_S": "0.05",
               "COORD_PAUSE_POLL_S": "0.2", "COORD_REQUEST_TIMEOUT_S": "20"}
KILL_ROUND = 3


def test_party_killed_mid_masked_round_the_round_completes_without_it_and_the_run_goes_on(tmp_path: Path) -> None:
    datasets = tiny_parties(3)
    parties = {p: party_proc(p, tmp_path, extra_env={"OMP_NUM_THREADS": "1"}) for p in datasets}
    # p2 dies (SIGKILL) when asked for its masked layer-1 projection of round KILL_ROUND: by then the
    # round has begun at every party and the layer-0 sum has been unmasked with p2 in it.
    dying = parties["p2"]
    port = dying.url.rsplit(":", 1)[1]
    parties["p2"] = Proc("p2", dying.url, {**dying.env, "DIE_AT": f"/rounds/{KILL_ROUND}/steps/projection?attempt=0&layer=1"},
                         [sys.executable, "-m", "tests.support.dying_party", "--port", port], dying.log)
    coord = coordinator_proc(tmp_path, extra_env=FAST_FAULTS)
    try:
        start_all([*parties.values(), coord])
        cc = CoordinatorClient(coord.url)
        with httpx.Client(timeout=60) as http:
            for pid, ds in datasets.items():
                load_party(http, parties[pid].url, ds)
                cc.register(pid, parties[pid].url)
        run = cc.create_run(rounds=KILL_ROUND + 4, min_parties=2, seed=3, config=TINY_CONFIG)
        assert run["privacy"]["secure_aggregation"]["enabled"] is True  # on by default
        status = cc.wait(run["run_id"], timeout=240)
        assert parties["p2"].popen is not None and parties["p2"].popen.wait(10) == -9  # really SIGKILLed
    finally:
        for proc in [coord, *parties.values()]:
            proc.kill()
    assert status["state"] == "completed", status["detail"]
    rounds = {r["round_index"]: r for r in status["rounds"]}
    assert sorted(rounds) == list(range(KILL_ROUND + 4))
    for t in range(KILL_ROUND):
        assert rounds[t]["participants"] == ["p0", "p1", "p2"] and not rounds[t]["failures"]
    killed = rounds[KILL_ROUND]
    # The round in which p2 died completed without it: its masks were recovered from p0 and p1.
    assert killed["participants"] == ["p0", "p1"]
    assert killed["failures"]["p2"].startswith("projection[1]")
    for t in range(KILL_ROUND + 1, KILL_ROUND + 4):  # and the run went on with the two survivors
        assert rounds[t]["participants"] == ["p0", "p1"] and rounds[t]["failures"]["p2"].startswith("begin")
    assert all(0.0 < r["metrics"]["test_rmse"] < 5.0 for r in rounds.values())
