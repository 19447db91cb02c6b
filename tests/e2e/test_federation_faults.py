"""Faults over real HTTP with separate processes: a party SIGKILLed mid-run, the coordinator SIGKILLed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from cli.localfed import (
    CoordinatorClient,
    Proc,
    coordinator_proc,
    load_party,
    party_proc,
    start_all,
)
from services.data.types import Dataset
from services.verfedgnn.config import run_config
from services.verfedgnn.reference import run_reference
from tests.support.federation import TINY_CONFIG, tiny_parties

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: thread start-up costs more than it saves on 2 cores
FAST_FAULTS = {**ONE_THREAD, "COORD_MAX_RETRIES": "1", "COORD_RETRY_BACKOFF_S": "0.05", "COORD_PAUSE_POLL_S": "0.2",
               "COORD_REQUEST_TIMEOUT_S": "20"}


@dataclass
class Cluster:
    """Party and coordinator processes with loaded data."""

    parties: dict[str, Proc]
    coordinator: Proc
    client: CoordinatorClient
    datasets: dict[str, Dataset]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three party processes and a coordinator process, data ingested over HTTP, parties registered."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    datasets = tiny_parties(3)
    parties = {p: party_proc(p, tmp_path, extra_env=ONE_THREAD) for p in datasets}
    coord = coordinator_proc(tmp_path, extra_env=FAST_FAULTS)
    try:
        start_all([*parties.values(), coord])
        client = CoordinatorClient(coord.url)
        with httpx.Client(timeout=60) as http:
            for pid, ds in datasets.items():
                load_party(http, parties[pid].url, ds)
                client.register(pid, parties[pid].url)
        yield Cluster(parties, coord, client, datasets)
    finally:
        for proc in [coord, *parties.values()]:
            proc.kill()


def test_party_killed_run_continues_pauses_below_min_and_party_rejoins(cluster: Cluster) -> None:
    cc = cluster.client
    run_id = cc.create_run(rounds=2000, min_parties=2, seed=2, config=TINY_CONFIG)["run_id"]
    cc.wait(run_id, rounds_done=3, timeout=120)
    cluster.parties["p2"].kill()
    killed_at = cc.run(run_id)["rounds_done"]
    status = cc.wait(run_id, rounds_done=killed_at + 3, timeout=120)
    after = [r for r in status["rounds"] if r["round_index"] > killed_at]
    assert after and all(r["participants"] == ["p0", "p1"] and "p2" in r["failures"] for r in after)
    assert all("test_rmse" in r["metrics"] for r in after)

    cluster.parties["p1"].kill()  # now below min_parties=2: the run must pause, not hang or fail
    paused = cc.wait(run_id, until=("paused",), timeout=60)
    assert "min_parties=2" in paused["detail"]
    frozen = paused["rounds_done"]

    start_all([cluster.parties["p1"], cluster.parties["p2"]])
    status = cc.wait(run_id, rounds_done=frozen + 3, timeout=120)
    assert status["state"] == "running"
    rejoined = [r for r in status["rounds"] if r["round_index"] >= frozen + 1]
    assert rejoined and all(r["participants"] == ["p0", "p1", "p2"] and not r["failures"] for r in rejoined)
    cancelled = cc.http.post(f"{cc.url}/v1/runs/{run_id}/cancel", headers=cc._h())
    assert cancelled.status_code == 202
    assert cc.wait(run_id, timeout=60)["state"] == "cancelled"


def test_coordinator_killed_mid_run_resumes_and_matches_uninterrupted_run(cluster: Cluster) -> None:
    cc = cluster.client
    rounds, seed = 10, 4
    run_id = cc.create_run(rounds=rounds, min_parties=3, seed=seed, config=TINY_CONFIG)["run_id"]
    cc.wait(run_id, rounds_done=3, timeout=120)
    cluster.coordinator.kill()
    start_all([cluster.coordinator])
    status = cc.wait(run_id, timeout=180)
    assert status["state"] == "completed", status["detail"]
    assert [r["round_index"] for r in status["rounds"]] == list(range(rounds))
    ref = run_reference(parties=cluster.datasets, config=run_config(TINY_CONFIG, seed=seed, rounds=rounds),
                        rounds=rounds)
    diffs = [abs(r["metrics"]["test_rmse"] - h.rmse["test"]) for r, h in zip(status["rounds"], ref.history, strict=True)]
    assert max(diffs) < 5e-5  # the resumed run equals an uninterrupted in-process run to 4 decimals
