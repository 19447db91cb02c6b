"""Customers registered without interactions take part in PSI over real HTTP, are served, and can be erased."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY
from services.data.types import Dataset, Ratings
from services.db.party_tables import ModelArtifact
from services.protocol.federation import unpack_tree
from tests.support.federation import TINY_CONFIG, federation, tiny_parties


def _without(r: Ratings | None, user: str) -> Ratings | None:
    return None if r is None else r.subset(r.user_ids.astype(str) != user)


def _users(ds: Dataset) -> set[str]:
    parts = [ds.train, ds.test, *([ds.valid] if ds.valid is not None else [])]
    return {str(u) for r in parts for u in r.user_ids.tolist()}


def test_a_user_registered_without_interactions_is_in_the_psi_intersection(tmp_path: Path) -> None:
    data = tiny_parties(2, seed=3)
    cold = min(_users(data["p1"]))
    p0 = data["p0"]
    # p0 knows `cold` only as a registered customer: none of their ratings stay at p0.
    data["p0"] = replace(p0, train=_without(p0.train, cold), test=_without(p0.test, cold),
                         valid=_without(p0.valid, cold))
    assert cold not in _users(data["p0"]) and cold in _users(data["p1"])
    rated_common = _users(data["p0"]) & _users(data["p1"])
    with federation(tmp_path, datasets=data) as fed:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        registered = fed.http.post(f"{fed.parties['p0'].url}/v1/users", json={"user_ids": [cold, "only-here"]},
                                    headers=admin)
        assert registered.json() == {"users": 2, "created": 2, "existing": 0}, registered.text
        run = fed.client.create_run(rounds=2, min_parties=2, seed=1, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=180)
        assert status["state"] == "completed", status
        # The registered-only user is counted; "only-here" (unknown at p1) is not.
        assert status["n_users"] == len(rated_common) + 1
        engine = create_engine(fed.party_db("p0"))
        with Session(engine) as session:
            payload = session.scalar(select(ModelArtifact.payload).where(
                ModelArtifact.name == f"alignment:{run['run_id']}"))
        engine.dispose()
        assert payload is not None and cold in unpack_tree(payload)["user_ids"].tolist()

        # Serving at p0: the aligned registered user is scored by the run's model (their row of the federation's
        # user representation, learnt from their history at p1), not the popularity fallback.
        key = {"X-API-Key": API_KEY}
        recs = fed.http.get(f"{fed.parties['p0'].url}/v1/users/{cold}/recommendations", params={"k": 5}, headers=key)
        assert recs.status_code == 200, recs.text
        body = recs.json()
        assert len(body["items"]) == 5 and body["fallback"] is None
        assert np.isfinite([it["score"] for it in body["items"]]).all()
        # A registered user outside the intersection gets the most-popular items, flagged.
        alone = fed.http.get(f"{fed.parties['p0'].url}/v1/users/only-here/recommendations", params={"k": 3},
                             headers=key)
        assert alone.status_code == 200 and alone.json()["fallback"] == "popularity", alone.text

        erased = fed.http.delete(f"{fed.parties['p0'].url}/v1/users/{cold}", headers=admin)
        assert erased.status_code == 200, erased.text
        assert erased.json()["interactions_deleted"] == 0 and run["run_id"] in erased.json()["runs_reset"]
        gone = fed.http.get(f"{fed.parties['p0'].url}/v1/users/{cold}/recommendations", headers=key)
        assert gone.status_code == 404
