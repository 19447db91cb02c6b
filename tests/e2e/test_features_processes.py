"""Party processes given features with `fedrec party ingest --kind user-features/item-features`, a run created
with no settings, and predictions served by the coordinator: the released federated model's test RMSE is the
in-process figure, and what the coordinator serves is that model with each party's rating component."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np
import pytest

from cli.localfed import ADMIN, API_KEY, party_proc
from services.verfedgnn.config import run_config
from services.verfedgnn.reference import run_reference
from tests.support.features import feature_rows, ingest_features, write_features
from tests.support.federation import process_federation, tiny_parties
from tests.support.released import released_model

pytestmark = [pytest.mark.slow]
ROUNDS, SEED = 4, 3


def test_served_predictions_of_a_run_with_features_match_the_inprocess_run(tmp_path: Path) -> None:
    datasets = tiny_parties(2)
    files = write_features(tmp_path, datasets)
    env = {"COORD_PAUSE_POLL_S": "0.2", "COORD_REQUEST_TIMEOUT_S": "60"}
    with process_federation(tmp_path, datasets, party=lambda pid, at: party_proc(pid, at),
                            coordinator_env=env) as fed, httpx.Client(timeout=60) as http:
        for pid, proc in fed.parties.items():
            ingest_features(proc.url, files[pid])
            counts = http.get(f"{proc.url}/v1/features", headers={"Authorization": f"Bearer {ADMIN}"}).json()
            assert (counts["user"] > 0) == (pid == "p0") and counts["item"] > 0
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED)  # no settings: the default preset
        status = fed.client.wait(run["run_id"], timeout=600)
        assert status["state"] == "completed", status["detail"]
        releases = http.get(f"{fed.coordinator.url}/v1/releases", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        release = next(r for r in releases if r["run_id"] == run["run_id"])
        # the pooled test figure covers the users every party holds (the intersection)
        common = set.intersection(*[{str(u) for r in (ds.train, ds.valid, ds.test) if r is not None
                                     for u in r.user_ids.tolist()} for ds in datasets.values()])
        pairs = [(str(u), str(i), pid, float(x)) for pid, ds in datasets.items()
                 for u, i, x in zip(ds.test.user_ids.tolist(), ds.test.item_ids.tolist(), ds.test.ratings.tolist())
                 if str(u) in common]
        body = {"pairs": [{"user_id": u, "item_id": i, "party_id": p} for u, i, p, _ in pairs]}
        served = http.post(f"{fed.coordinator.url}/v1/predictions", json=body, headers={"X-API-Key": API_KEY})
        assert served.status_code == 200, served.text
        answer = served.json()
        assert answer["partial"] is False and all(p["fallback"] is None for p in answer["predictions"])
        got = np.array([p["rating"] for p in answer["predictions"]])
        truth = np.array([x for *_, x in pairs])
        models = {pid: released_model(tmp_path / pid / "party.db") for pid in datasets}
    fed_only, with_component = np.empty(len(pairs)), np.empty(len(pairs))
    for j, (u, i, pid, _) in enumerate(pairs):
        m = models[pid]
        row, col = np.array([list(m.user_ids).index(u)]), np.array([list(m.item_ids).index(i)])
        fed_only[j] = m.without_component().scores(row, col)[0]
        with_component[j] = m.scores(row, col)[0]
    np.testing.assert_allclose(got, with_component, atol=1e-6)  # served: the model with the party's component
    rmse_served = math.sqrt(float(np.mean((fed_only - truth) ** 2)))  # the federated model alone
    config = run_config(run["config"], seed=SEED, rounds=ROUNDS)  # what the run resolved (the default preset)
    ref = run_reference(parties=datasets, config=config, rounds=ROUNDS, features=feature_rows(files))
    figure = ref.history[release["round_index"]].rmse["test"]
    assert abs(rmse_served - figure) <= 5e-4, (rmse_served, figure)
    assert abs(release["metrics"]["test_rmse"] - figure) <= 5e-4
