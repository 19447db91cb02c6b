"""Release retention over live HTTP: after more completed runs than COORD_RELEASES_KEEP, the older releases are
pruned at the coordinator and their models, trainer snapshots and alignments are gone at every party."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY
from services.db.party_tables import FederationState, ModelArtifact
from services.db.session import make_engine
from tests.support.federation import TINY_CONFIG, federation


def _stored(url: str) -> tuple[set[str], list[str], set[str]]:
    """(artifact names, serving models' release ids, federation-state keys) in a party's database."""
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            names = set(s.scalars(select(ModelArtifact.name)))
            models = sorted(str(m["release_id"]) for m in s.scalars(
                select(ModelArtifact.meta).where(ModelArtifact.name == "serving_model")))
            keys = set(s.scalars(select(FederationState.key)))
    finally:
        engine.dispose()
    return names, models, keys


def test_older_releases_are_pruned_everywhere(tmp_path: Path) -> None:
    # A wide gate: every run's release becomes active, so retention alone decides what stays.
    with federation(tmp_path, n_parties=2, releases_keep=2, release_tolerance=100.0,
                    release_ndcg_tolerance=1.0) as fed:
        runs = []
        for seed in range(3):
            run = fed.client.create_run(rounds=1, min_parties=2, seed=seed, config=TINY_CONFIG)
            assert fed.client.wait(run["run_id"], timeout=300)["state"] == "completed"
            runs.append(run["run_id"])
        listed = fed.http.get(f"{fed.coordinator.url}/v1/releases", headers={"Authorization": f"Bearer {ADMIN}"})
        states = {r["release_id"]: (r["state"], r["run_id"]) for r in listed.json()}
        assert states == {"release-3": ("active", runs[2]), "release-2": ("retired", runs[1]),
                          "release-1": ("pruned", runs[0])}
        assert "COORD_RELEASES_KEEP" in next(r["reason"] for r in listed.json() if r["release_id"] == "release-1")
        for pid in fed.parties:
            names, models, keys = _stored(fed.party_db(pid))
            assert models == ["release-2", "release-3"], pid
            assert not {f"trainer:{runs[0]}", f"alignment:{runs[0]}"} & names and f"run:{runs[0]}" not in keys
            assert {f"trainer:{runs[2]}", f"alignment:{runs[2]}", f"trainer:{runs[1]}"} <= names
        # Rollback to the kept release-2 still works; the pruned release-1 is refused with the reason.
        admin = {"Authorization": f"Bearer {ADMIN}"}
        back = fed.http.post(f"{fed.coordinator.url}/v1/releases/release-2/activate", headers=admin, json={})
        assert back.status_code == 200 and back.json()["state"] == "active"
        gone = fed.http.post(f"{fed.coordinator.url}/v1/releases/release-1/activate", headers=admin,
                             json={"force": True})
        assert gone.status_code == 409 and "pruned" in gone.json()["detail"]
        user = str(fed.datasets["p0"].train.user_ids[0])
        rec = fed.http.get(f"{fed.parties['p0'].url}/v1/users/{user}/recommendations",
                           headers={"X-API-Key": API_KEY}).json()
        assert rec["release_id"] == "release-2"  # the activate call refreshed this (single) party process
