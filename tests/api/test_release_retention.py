"""Release retention at a party over real HTTP: prune keeps the active and the kept releases, deletes the rest
with their runs' trainer snapshots and alignments; erasure reaches a kept release that is not active."""

from __future__ import annotations

import httpx
import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.db.party_tables import FederationState, ModelArtifact
from services.party import fed_store
from services.party.serving import ARTIFACT_NAME, STAGED_PREFIX, ServingModel, publish
from services.protocol import PROTOCOL_VERSION
from services.protocol.federation import pack_tree
from services.verfedgnn.state_codec import dump_state
from tests.support.party import ADMIN, API_KEY, COORDINATOR, Party

COORD = {"Authorization": f"Bearer {COORDINATOR}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
RATINGS = [("u1", "i1", 5.0), ("u1", "i2", 3.0), ("u2", "i1", 4.0), ("u2", "i3", 2.0), ("u3", "i3", 4.0)]


def _model(run_id: str) -> ServingModel:
    return ServingModel(run_id=run_id, round_index=1, user_ids=np.array(["u1", "u2", "u3"]),
                        item_ids=np.array(["i1", "i2", "i3"]), h_u=np.eye(3, 2, dtype=np.float32),
                        h_v=np.eye(3, 2, dtype=np.float32), user_bias=np.zeros(3, np.float32),
                        item_bias=np.zeros(3, np.float32), global_bias=3.0, rating_min=1.0, rating_max=5.0)


def _stage(party: Party, n: int) -> None:
    """Releases rel-1..rel-n of runs r1..rn, each with a trainer snapshot, an alignment and run settings."""
    party.admin.post("/v1/interactions", json={"rows": [{"user_id": u, "item_id": i, "rating": r}
                                                        for u, i, r in RATINGS]}).raise_for_status()
    with Session(party.engine) as session:
        for k in range(1, n + 1):
            publish(session=session, model=_model(f"r{k}"), release_id=f"rel-{k}")
            fed_store.put_artifact(session=session, name=f"trainer:r{k}", kind="trainer_state",
                                   payload=dump_state({"round": k}))  # a real snapshot's encoding: erasure reads it
            fed_store.put_artifact(session=session, name=f"alignment:r{k}", kind="alignment",
                                   payload=pack_tree({"user_ids": np.array(["u1", "u2", "u3"])}))
            fed_store.put_state(session=session, key=f"run:r{k}", value={"seed": k})


def _coord(party: Party) -> httpx.Client:
    return httpx.Client(base_url=party.url, headers=COORD, timeout=30)


def _runs_with_artifacts(party: Party) -> set[str]:
    with Session(party.engine) as session:
        names = set(session.scalars(select(ModelArtifact.name)))
        states = set(session.scalars(select(FederationState.key)))
    return {f"r{k}" for k in range(1, 10)
            if {f"trainer:r{k}", f"alignment:r{k}"} <= names and f"run:r{k}" in states}


def _served_release(party: Party) -> str | None:
    with httpx.Client(base_url=party.url, headers={"X-API-Key": API_KEY}, timeout=30) as c:
        resp = c.get("/v1/users/u1/recommendations", params={"k": 1})
        assert resp.status_code == 200, resp.text
        return resp.json()["release_id"]  # type: ignore[no-any-return]


def test_prune_keeps_active_and_kept_and_removes_the_rest(party: Party) -> None:
    _stage(party, 4)
    with _coord(party) as c:
        assert c.post("/v1/federation/releases/rel-1/activate", json={}).status_code == 200
        resp = c.post("/v1/federation/releases/prune", json={"keep": ["rel-3", "rel-4"]})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"pruned": ["rel-2"], "runs": ["r2"]}  # rel-1 is active: never pruned
        assert c.post("/v1/federation/releases/rel-2/activate", json={}).status_code == 404
        assert c.post("/v1/federation/releases/rel-3/activate", json={}).status_code == 200
        again = c.post("/v1/federation/releases/prune", json={"keep": ["rel-4"]}).json()
        assert again == {"pruned": ["rel-1"], "runs": ["r1"]}  # idempotent: only what is left goes
    assert _runs_with_artifacts(party) == {"r3", "r4"}
    with Session(party.engine) as session:
        metas = [m["release_id"] for m in session.scalars(select(ModelArtifact.meta)
                                                          .where(ModelArtifact.name == ARTIFACT_NAME))]
        staged = set(session.scalars(select(FederationState.key).where(FederationState.key.startswith(STAGED_PREFIX))))
    assert sorted(metas) == ["rel-3", "rel-4"]
    assert staged == {STAGED_PREFIX + "rel-3", STAGED_PREFIX + "rel-4"}
    assert _served_release(party) == "rel-3"


def test_prune_refuses_bad_input_and_other_credentials(party: Party) -> None:
    with _coord(party) as c:
        bad = c.post("/v1/federation/releases/prune", json={"keep": ["no spaces"]})
        assert bad.status_code == 422 and "keep" in bad.text
        assert c.post("/v1/federation/releases/prune", json={}).status_code == 422
    admin = {"Authorization": f"Bearer {ADMIN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
    resp = httpx.post(f"{party.url}/v1/federation/releases/prune", json={"keep": []}, headers=admin, timeout=30)
    assert resp.status_code in (401, 403)


def test_erasure_reaches_a_kept_release_that_is_not_active(party: Party) -> None:
    _stage(party, 2)
    with _coord(party) as c:
        assert c.post("/v1/federation/releases/rel-1/activate", json={}).status_code == 200
    erased = party.admin.delete("/v1/users/u1")
    assert erased.status_code == 200, erased.text
    with Session(party.engine) as session:
        version = session.get(FederationState, STAGED_PREFIX + "rel-2").value  # type: ignore[union-attr]
        row = session.scalar(select(ModelArtifact).where(ModelArtifact.name == ARTIFACT_NAME,
                                                        ModelArtifact.version == version))
        assert row is not None and row.payload is not None
        kept = ServingModel.from_bytes(row.payload)
    assert kept.run_id == "r2" and "u1" not in kept.user_ids.tolist() and len(kept.user_ids) == 2
    with _coord(party) as c:
        assert c.post("/v1/federation/releases/rel-2/activate", json={}).status_code == 200
    with httpx.Client(base_url=party.url, headers={"X-API-Key": API_KEY}, timeout=30) as c:
        assert c.get("/v1/users/u1/recommendations").status_code == 404
        assert c.get("/v1/users/u2/recommendations").json()["release_id"] == "rel-2"
