"""Partial user overlap over real HTTP: each party trains its non-aligned users privately, nothing of them crosses.

Two live parties share 30 of 60 users; 15 more are only at p0, 15 only at p1. The wire audit records
every federation body crossing a party boundary and finds no non-aligned user's id, no array sized by
them, no count covering them; the coordinator's sums are the in-process run's (their items aggregate them).
Their recommendations come from the run's model (the released one), and erasing one leaves no trace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY
from services.data.types import Dataset, Ratings
from services.db.party_tables import FederationState, ModelArtifact
from services.evaluation.served import served_scores
from services.evaluation.topk import party_scores
from services.protocol.federation import unpack_tree
from services.verfedgnn.config import run_config
from services.verfedgnn.reference import run_reference
from tests.e2e.test_federation_http import Recorder, _arrays
from tests.support.federation import TINY_CONFIG, Federation, federation, tiny_parties

ROUNDS, SEED = 4, 7


def _keep(r: Ratings | None, drop: set[str]) -> Ratings | None:
    return None if r is None else r.subset(~np.isin(r.user_ids.astype(str), sorted(drop)))


def _without(ds: Dataset, drop: set[str]) -> Dataset:
    return replace(ds, train=_keep(ds.train, drop), valid=_keep(ds.valid, drop), test=_keep(ds.test, drop))


def _users(ds: Dataset) -> set[str]:
    return {str(u) for r in (ds.train, ds.valid, ds.test) if r is not None for u in r.user_ids.tolist()}


def partial_overlap() -> tuple[dict[str, Dataset], dict[str, set[str]]]:
    """tiny_parties(2) with a quarter of the users only at p0 and another quarter only at p1."""
    base = tiny_parties(2)
    users = sorted(_users(base["p0"]))
    only = {"p0": set(users[0::4]), "p1": set(users[1::4])}
    data = {"p0": _without(base["p0"], only["p1"]), "p1": _without(base["p1"], only["p0"])}
    return data, only


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Any], list[Any],
                                                                     dict[str, set[str]]]]:
    """One completed partial-overlap run (secure aggregation, the default), every federation body recorded."""
    log: list[tuple[str, str, bytes, bytes]] = []
    data, only = partial_overlap()
    with federation(tmp_path_factory.mktemp("partial"), datasets=data,
                    wrap=lambda pid, app: Recorder(pid, app, log)) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=180)
        assert status["state"] == "completed", status["detail"]
        yield fed, status, log, only


def _config() -> Any:
    return run_config(TINY_CONFIG, seed=SEED, rounds=ROUNDS)


def test_wire_audit_finds_nothing_of_the_non_aligned_users(done: tuple[Federation, dict[str, Any], list[Any],
                                                                         dict[str, set[str]]]) -> None:
    fed, status, log, only = done
    common = _users(fed.datasets["p0"]) & _users(fed.datasets["p1"])
    n, d = status["n_users"], TINY_CONFIG["dim"]
    assert n == len(common) == 30 and all(len(v) == 15 for v in only.values())
    q = round(TINY_CONFIG["q_ratio"] * n)
    # what a leak would look like: a projection or a gradient sized by every user of a party
    with_private = {round(TINY_CONFIG["q_ratio"] * (n + 15)), n + 15}
    assert not with_private & {n, q, d}
    begin = next(b for _, p, b, _ in log if p.endswith("/steps/begin"))
    # public gradients, the loss, (sse, sae, count) per split, the validation ranking sums (Σ NDCG@10, users)
    finish_size = sum(int(np.prod(v.shape)) for v in unpack_tree(begin)["public"].values()) + 1 + 3 * 3 + 2
    ids = [u.encode() for users in only.values() for u in users]
    seen = set()
    for party, path, sent, answered in log:
        seen.add(path.rsplit("/", 1)[1])
        for body in (sent, answered):
            assert not any(u in body for u in ids), f"a non-aligned user's id crossed at {path}"
            assert b"user-" not in body, f"a user id crossed at {path}"
        if path.endswith("/configure"):
            # the counts a party announces cover its aligned users only
            ds = fed.datasets[party]
            mine = np.isin(ds.train.user_ids.astype(str), sorted(common))
            got = json.loads(answered)
            assert got["n_users"] == n and got["train_count"] == int(mine.sum()) < len(ds.train)
            assert got["train_sum"] == pytest.approx(float(ds.train.ratings[mine].sum()))
        for name, shape in _arrays(party, path, sent, answered):
            if name in ("masked", "total"):
                assert shape in ((q * d,), (finish_size,)), f"{path}: {name} {shape} is not N_aligned-sized"
            else:
                assert shape[:1] in ((n,), (q,), (d,), (1,), (TINY_CONFIG["layers"],),
                                     (TINY_CONFIG["layers"] + 1,)), f"{path}: unexpected array {name} {shape}"
    assert {"configure", "begin", "projection", "total", "finish"} <= seen


def test_the_coordinators_sums_are_the_in_process_runs_and_the_non_aligned_users_take_part(
    done: tuple[Federation, dict[str, Any], list[Any], dict[str, set[str]]],
) -> None:
    """Bit-identical to the in-process run with private users, and different from a run without them.

    The sums a party reports (loss, error sums) are of its aligned users' ratings only (the unit tests
    show the non-aligned users' loss adds nothing to them or to the public gradients); they differ from an
    aligned-only run from round 0 on because each party's items aggregate its non-aligned users' layer-k
    representations into layer k+1, as the party alone would. What crosses is still N_aligned-sized and
    holds none of their ids (the wire audit above).
    """
    fed, status, _, only = done
    with_private = run_reference(parties=fed.datasets, config=_config(), rounds=ROUNDS)
    got = [(r["metrics"]["loss"], r["metrics"]["test_rmse"]) for r in status["rounds"]]
    assert got == [(h.loss, h.rmse["test"]) for h in with_private.history]
    gone = only["p0"] | only["p1"]
    aligned_only = {p: _without(ds, gone) for p, ds in fed.datasets.items()}
    without = run_reference(parties=aligned_only, config=_config(), rounds=ROUNDS)
    assert all(a != (h.loss, h.rmse["test"]) for a, h in zip(got, without.history))


def _tree_strings(node: Any) -> set[str]:
    """Every string value in a decoded artifact tree (str arrays included)."""
    if isinstance(node, np.ndarray):
        return {str(x) for x in node.ravel().tolist()} if node.dtype.kind == "U" else set()
    if isinstance(node, dict):
        return set().union(*[_tree_strings(v) for v in node.values()], set(node))
    if isinstance(node, list):
        return set().union(*[_tree_strings(v) for v in node])
    return {node} if isinstance(node, str) else set()


def _artifacts(fed: Federation, party_id: str) -> dict[str, Any]:
    engine = create_engine(fed.party_db(party_id))
    with Session(engine) as s:
        arts = {f"{a.name}@{a.version}": unpack_tree(a.payload, finite=False)
                for a in s.scalars(select(ModelArtifact)) if a.payload}
        state = {r.key: r.value for r in s.scalars(select(FederationState))}
    engine.dispose()
    return {"artifacts": arts, "state": state}


def test_a_non_aligned_user_is_served_by_the_run_and_erased_without_trace(
    done: tuple[Federation, dict[str, Any], list[Any], dict[str, set[str]]],
) -> None:
    fed, status, _, only = done
    key, admin = {"X-API-Key": API_KEY}, {"Authorization": f"Bearer {ADMIN}"}
    ref = run_reference(parties=fed.datasets, config=_config(), rounds=ROUNDS)
    trainer = ref.federation.parties["p0"]
    model = trainer.serving_model()
    private = trainer.data.private_user_ids
    assert sorted(private) == sorted(only["p0"]) and model["user_repr"].shape[0] == status["n_users"] + 15
    user = private[3]
    url = f"{fed.parties['p0'].url}/v1/users/{user}/recommendations"
    resp = fed.http.get(url, params={"k": 5}, headers=key)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["fallback"] is None and body["run_id"] == status["run_id"] and body["release_id"]
    # the scores are the run's model's, blended with p0's own EASE: the user's private row of the in-process twin
    # of this run, through the harness's blend (`services.evaluation.served`), as p0 fitted it at publish
    item_ids = sorted({str(i) for r in (fed.datasets["p0"].train, fed.datasets["p0"].valid, fed.datasets["p0"].test)
                       if r is not None for i in r.item_ids.tolist()})
    row = trainer.data.n_users + 3
    cols = [item_ids.index(it["item_id"]) for it in body["items"]]
    blended = served_scores(trainer.data, party_scores(model), seed=SEED)
    expected = blended.scores[row, cols]
    assert [it["score"] for it in body["items"]] == pytest.approx(expected.tolist(), rel=1e-4, abs=1e-4)
    assert cols == np.lexsort((np.arange(blended.scores.shape[1]), -blended.scores[row]))[:5].tolist()
    # through the coordinator: p1 does not know the user (404 there), the answer is p0's list, complete
    merged = fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", params={"k": 5}, headers=key)
    assert merged.status_code == 200, merged.text
    mj = merged.json()
    assert {it["party_id"] for it in mj["items"]} == {"p0"} and mj["partial"] is False and mj["unavailable"] == {}
    assert mj["release_id"] == body["release_id"] and [it["item_id"] for it in mj["items"]] == [
        it["item_id"] for it in body["items"]]

    before = _artifacts(fed, "p0")
    trainer_names = [k for k in before["artifacts"] if k.startswith(f"trainer:{status['run_id']}@")]
    assert trainer_names and all(user in _tree_strings(before["artifacts"][k]) for k in trainer_names)
    erased = fed.http.delete(f"{fed.parties['p0'].url}/v1/users/{user}", headers=admin)
    assert erased.status_code == 200, erased.text
    report = erased.json()
    assert status["run_id"] in report["runs_reset"] and report["interactions_deleted"] > 0
    assert set(trainer_names) <= set(report["artifacts_rewritten"])
    assert fed.http.get(url, headers=key).status_code == 404
    assert fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", headers=key).status_code == 404
    after = _artifacts(fed, "p0")
    for name, tree in after["artifacts"].items():
        assert user not in _tree_strings(tree), f"{name} still names the erased user"
    assert user not in json.dumps(after["state"])
    # the other private users keep their rows, the erased one's row is gone from every trainer checkpoint
    for name in trainer_names:
        old, new = before["artifacts"][name]["private_users"], after["artifacts"][name]["private_users"]
        keep = old["ids"] != user
        assert new["ids"].tolist() == old["ids"][keep].tolist()
        assert np.array_equal(new["rows"]["user_emb"]["__tensor__"], old["rows"]["user_emb"]["__tensor__"][keep])

    # the next run trains and serves without the user
    again = fed.client.create_run(rounds=2, min_parties=2, seed=SEED + 1, config=TINY_CONFIG)
    st = fed.client.wait(again["run_id"], timeout=180)
    assert st["state"] == "completed", st["detail"]
    latest = _artifacts(fed, "p0")
    for name, tree in latest["artifacts"].items():
        assert user not in _tree_strings(tree), f"{name} names the erased user"
    other = private[4]
    resp = fed.http.get(f"{fed.parties['p0'].url}/v1/users/{other}/recommendations", params={"k": 3}, headers=key)
    # served by a run's model (the new release, or the first one when the promotion gate holds the new one)
    assert resp.status_code == 200 and resp.json()["fallback"] is None
    assert resp.json()["run_id"] in (status["run_id"], again["run_id"])
