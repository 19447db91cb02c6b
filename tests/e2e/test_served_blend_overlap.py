"""The served blend at partial overlap, over real processes: `fedrec data split --overlap 0.5`, the CLI ingest, a short
run of a small model (the blend needs no setting), then every user's top-10 from each party process equals the in-process combination.

The in-process side rebuilds each party's data exactly as the party does (`VerFedGNNPlan.load` over the rows in
its database, the run's alignment and seed), fits the local model beside the released federated model
(`services.verfedgnn.local.fit_local`) and ranks every user, aligned or not, cold or warm, through
`models.blend.LocalRanking`. The release carries each party's value report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY, CoordinatorClient, coordinator_proc, party_proc, start_all
from models.blend import histories
from services.federation.plan import RatingTable
from services.party import fed_store as store
from services.party.federation import FederationService
from services.party.serving import ServingModel
from services.protocol.federation import unpack_tree
from services.verfedgnn.local import fit_local
from services.verfedgnn.plan import PLAN
from tests.support.released import served_model

ROUNDS, SEED, K = 5, 11, 10
CONFIG = {"dim": 8, "layers": 2, "rank_dims": 2, "patience": ROUNDS}


def _fedrec(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"fedrec {' '.join(args[:3])} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


def _served_model(db: Path) -> tuple[ServingModel, list[str], list[str], RatingTable, dict[str, Any]]:
    """The party's active serving model, the run's alignment, its catalogue, its rating rows and the run's stored
    settings (the coordinator's config and seed, as the party received them), from its database."""
    engine = create_engine(f"sqlite:///{db}")
    try:
        with Session(engine) as session:
            model = served_model(session)
            alignment = store.get_artifact(session=session, name=f"alignment:{model.run_id}")
            assert alignment is not None
            users = [str(u) for u in unpack_tree(alignment[1])["user_ids"].tolist()]
            users_, items_, ratings, codes = store.load_ratings(session=session)
            table = RatingTable(np.asarray(users_, dtype=object), np.asarray(items_, dtype=object), ratings, codes)
            run = store.get_state(session=session, key=f"run:{model.run_id}")
            assert run is not None
            return model, users, store.all_item_ids(session=session), table, run
    finally:
        engine.dispose()


@pytest.mark.slow
def test_served_top_10_at_overlap_half_is_the_in_process_combination(tmp_path: Path) -> None:
    _fedrec("data", "synth", "--out", str(tmp_path / "synth"), "--users", "160", "--items", "90", "--ratings", "4000",
            "--parties", "1", "--seed", "3")
    _fedrec("data", "split", str(tmp_path / "synth" / "party0.csv"), "--out", str(tmp_path / "split"),
            "--parties", "2", "--overlap", "0.5", "--seed", "3")
    parties = {pid: party_proc(pid, tmp_path) for pid in ("p0", "p1")}
    coordinator = coordinator_proc(tmp_path)
    procs = [*parties.values(), coordinator]
    try:
        start_all(procs, timeout=180)
        client = CoordinatorClient(coordinator.url, http=httpx.Client(timeout=60))
        for k, (pid, proc) in enumerate(parties.items()):
            _fedrec("party", "ingest", str(tmp_path / "split" / f"party{k}.csv"), "--url", proc.url,
                    "--token", ADMIN)
            client.register(pid, proc.url)
        run = client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=CONFIG)
        status = client.wait(run["run_id"], timeout=600)
        assert status["state"] == "completed", status["detail"]
        with httpx.Client(timeout=60) as http:
            release = http.get(f"{coordinator.url}/v1/releases/release-1",
                               headers={"Authorization": f"Bearer {ADMIN}"}).json()
            lists: dict[str, dict[str, list[str]]] = {}
            for pid, proc in parties.items():
                model, aligned_ids, item_ids, table, stored = _served_model(tmp_path / pid / "party.db")
                config = FederationService._config(PLAN, stored["config"], int(stored["seed"]))  # as the party does
                data = PLAN.load(config=config, party_id=pid, table=table, user_order=aligned_ids,
                                 item_order=item_ids, total_items=0, rating_range=(model.rating_min, model.rating_max),
                                 local_seed=0)
                assert data.n_private > 0 and data.n_users > 0, "partial overlap: aligned and private users both"
                assert model.local is not None, "a run with no settings serves the blend"
                fed = np.stack([model.user_scores(r) for r in range(len(model.user_ids))])
                local = fit_local(data, fed_rows=lambda rows: fed[rows], seed=int(stored["seed"]))
                n = data.n_users + data.n_private
                t, v = data.split("train"), data.split("valid")
                history = histories(np.concatenate([t.users, v.users]), np.concatenate([t.items, v.items]), n)
                scores = local.served(fed[:n], history, np.arange(n) < data.n_users)
                want, got = {}, {}
                for row, user in enumerate(aligned_ids + list(data.private_user_ids)):
                    order = np.lexsort((np.arange(scores.shape[1]), -scores[row]))
                    want[user] = [item_ids[c] for c in order[:K] if np.isfinite(scores[row, c])]
                    resp = http.get(f"{proc.url}/v1/users/{user}/recommendations", params={"k": K},
                                    headers={"X-API-Key": API_KEY})
                    assert resp.status_code == 200, resp.text
                    got[user] = [it["item_id"] for it in resp.json()["items"]]
                mismatched = [u for u in want if want[u] != got[u]]
                assert not mismatched, f"{pid}: {len(mismatched)} of {len(want)} lists differ, e.g. {mismatched[:3]}"
                lists[pid] = got
    finally:
        for proc in procs:
            proc.stop()
    assert all(len(v) > 20 for v in lists.values())
    assert release["value_report"], "each party reports what it gains"
    for rows in release["value_report"].values():
        assert {"slice", "users", "local_ndcg10", "federated_ndcg10", "served_ndcg10"} <= set(rows[0])
