"""A full federated run over real HTTP: three live party servers, a live coordinator, PSI, rounds, serving."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cli.localfed import API_KEY, COORD_TOKEN
from services.db.party_tables import FederationState, ModelArtifact
from services.protocol import PROTOCOL_VERSION
from services.protocol.arrays import decode_array
from services.protocol.federation import pack_tree, unpack_tree
from services.verfedgnn.config import run_config
from services.verfedgnn.messages import decode_upload
from services.verfedgnn.reference import party_datas, run_reference
from tests.support.federation import TINY_CONFIG, Federation, federation

ROUNDS, SEED = 6, 5


class Recorder:
    """ASGI wrapper that keeps every federation request and response body crossing the party boundary."""

    def __init__(self, party_id: str, app: Any, log: list[tuple[str, str, bytes, bytes]]) -> None:
        self.party_id, self.app, self.log = party_id, app, log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/federation"):
            await self.app(scope, receive, send)
            return
        sent: list[bytes] = []
        answered: list[bytes] = []

        async def rec() -> Any:
            msg = await receive()
            sent.append(msg.get("body", b""))
            return msg

        async def snd(msg: Any) -> None:
            if msg["type"] == "http.response.body":
                answered.append(msg.get("body", b""))
            await send(msg)

        await self.app(scope, rec, snd)
        self.log.append((self.party_id, scope["path"], b"".join(sent), b"".join(answered)))


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Any], list[Any]]]:
    """One completed run, with every federation body recorded."""
    log: list[tuple[str, str, bytes, bytes]] = []
    root = tmp_path_factory.mktemp("fed")
    with federation(root, wrap=lambda pid, app: Recorder(pid, app, log)) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=TINY_CONFIG)
        assert run["state"] == "pending"
        status = fed.client.wait(run["run_id"], timeout=120)
        yield fed, status, log


def test_run_completes_with_status_metrics_and_traffic(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    fed, status, _ = done
    assert status["state"] == "completed", status["detail"]
    assert status["rounds_done"] == ROUNDS and len(status["rounds"]) == ROUNDS
    assert status["n_users"] == party_datas(fed.datasets)["p0"].n_users > 0
    for r in status["rounds"]:
        assert r["participants"] == ["p0", "p1", "p2"] and r["failures"] == {}
        assert set(r["bytes_sent"]) == {"p0", "p1", "p2"} and min(r["bytes_received"].values()) > 0
        assert {"train_rmse", "valid_rmse", "test_rmse"} <= set(r["metrics"])
        assert "p0.test_rmse" not in r["metrics"]  # secure aggregation: the coordinator sees only sums
    assert all(status["bytes_sent"][p] > sum(r["bytes_sent"][p] for r in status["rounds"]) for p in fed.parties)


def test_http_run_matches_inprocess_run(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    fed, status, _ = done
    ref = run_reference(parties=fed.datasets, config=run_config(TINY_CONFIG, seed=SEED, rounds=ROUNDS),
                        rounds=ROUNDS)
    assert status["n_users"] == ref.federation.coordinator.n_users
    http_rmse = [r["metrics"]["test_rmse"] for r in status["rounds"]]
    # Bit-identical: the arrays travel losslessly and both sides order the ratings the same way.
    assert http_rmse == [h.rmse["test"] for h in ref.history]
    assert [r["metrics"]["loss"] for r in status["rounds"]] == [h.loss for h in ref.history]
    assert http_rmse[-1] < http_rmse[0]


def _arrays(party: str, path: str, sent: bytes, answered: bytes) -> list[tuple[str, tuple[int, ...]]]:
    """Shapes of every array in a round step's bodies, decoded as the runtime's message trees."""
    if "/steps/" not in path:
        return []
    step = path.rsplit("/steps/", 1)[1]
    if step == "begin":
        return [(k, v.shape) for k, v in unpack_tree(sent)["public"].items()]
    if step in ("projection", "finish"):
        up = unpack_tree(answered)
        assert set(up) == {"masked"}, f"{path}: a summed step answered {sorted(up)}, not a masked vector"
        assert up["masked"].dtype == np.uint64, f"{path}: a masked step answered {up['masked'].dtype}"
        return [("masked", up["masked"].shape)]
    if step == "total":
        return [("total", unpack_tree(sent)["total"].shape)]
    return []


def _round(path: str) -> int:
    return int(path.split("/rounds/")[1].split("/")[0])


def test_no_body_carries_ratings_item_ids_or_item_embeddings(
    done: tuple[Federation, dict[str, Any], list[Any]],
) -> None:
    fed, status, log = done
    datas = party_datas(fed.datasets)
    n, d = status["n_users"], TINY_CONFIG["dim"]
    q = round(TINY_CONFIG["q_ratio"] * n)
    forbidden = {x.n_items for x in datas.values()} | {len(ds.train) + len(ds.test) + len(ds.valid or [])
                                                       for ds in fed.datasets.values()}
    assert not forbidden & {n, q, d, 1, 2, 3}, "sizes must be distinguishable for this check to mean anything"
    paths = {p for _, p, _, _ in log}
    assert any(p.endswith("/psi/reblind") for p in paths) and any(p.endswith("/steps/projection") for p in paths)
    # Wire audit: with secure aggregation every summed step answered a masked vector (checked in _arrays).
    begin = next(b for _, p, b, _ in log if p.endswith("/steps/begin"))
    # public gradients, the loss, (sse, sae, count) per split, the validation ranking sums (Σ NDCG@10, users)
    finish_size = sum(int(np.prod(v.shape)) for v in unpack_tree(begin)["public"].values()) + 1 + 3 * 3 + 2
    for party, path, sent, answered in log:
        for body in (sent, answered):
            assert b"user-" not in body and b"item-" not in body, f"an id crossed the boundary at {path}"
        if path.endswith(("/psi/start", "/psi/reblind")):
            assert len(answered) % 32 == 0
        if path.endswith("/configure"):
            assert set(json.loads(answered)) == {"party_id", "n_users", "n_items", "train_count", "train_sum", "key"}
        for name, shape in _arrays(party, path, sent, answered):
            if name in ("masked", "total"):  # flat: Y_p^k (q × D) or the finish vector (public gradients + sums)
                assert shape in ((q * d,), (finish_size,)), f"{path}: unexpected masked vector {shape}"
                continue
            assert not set(shape) & forbidden, f"{path}: array {name} {shape} has a per-item or per-rating axis"
            assert shape[:1] in ((n,), (q,), (d,), (1,), (TINY_CONFIG["layers"],),
                                 (TINY_CONFIG["layers"] + 1,)), f"{path}: unexpected array {name} {shape}"


def _fingerprint(fed: Federation, party_id: str) -> list[tuple[str, int, str]]:
    engine = create_engine(fed.party_db(party_id))
    with Session(engine) as s:
        arts = [(a.name, a.version, hashlib.sha256(a.payload or b"").hexdigest())
                for a in s.scalars(select(ModelArtifact).order_by(ModelArtifact.name, ModelArtifact.version))]
        state = [(r.key, 0, json.dumps(r.value, sort_keys=True)) for r in s.scalars(select(FederationState))]
    engine.dispose()
    return arts + state


def test_refused_calls_change_nothing(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    fed, status, _ = done
    url = f"{fed.parties['p1'].url}/v1/federation/runs/{status['run_id']}/rounds"
    good = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
    public = unpack_tree(pack_tree({"x": np.zeros(1, np.float32)}))
    before = _fingerprint(fed, "p1")
    nxt = ROUNDS
    begin = f"{url}/{nxt}/steps/begin?attempt=0"
    cases = [
        (begin, {**good, "Authorization": "Bearer wrong"}, b"", 403, "forbidden"),
        (begin, {"X-Fedrec-Protocol": PROTOCOL_VERSION}, b"", 401, "unauthorized"),
        (begin, {**good, "X-Fedrec-Protocol": "0"}, b"", 409, "protocol_error"),
        (f"{url}/0/steps/begin?attempt=0", good, pack_tree({"public": public}), 409, "protocol_error"),  # stale
        (begin, good, b"\x93NUMPY garbage", 422, "validation_failed"),
        (begin, good, pack_tree({"public": public}), 422, "validation_failed"),  # wrong names
        # a body that is not a message is refused before the round is looked at (P6: decoded before the lock)
        (f"{url}/{nxt}/steps/total?attempt=0&layer=0", good, b"junk", 422, "validation_failed"),
        (f"{url}/{nxt}/steps/finish?attempt=0", good, b"", 409, "protocol_error"),
        (f"{url}/{nxt - 1}/steps/recovery:projection?attempt=1&layer=0", good,
         pack_tree({"survivors": ["p1", "p2"], "dropped": ["p0"]}), 409, "protocol_error"),  # nothing to reveal
        (f"{url}/{nxt}/steps/Bad%20Step?attempt=0", good, b"", 422, "validation_failed"),
    ]
    for target, headers, body, code, kind in cases:
        resp = fed.http.post(target, content=body, headers=headers)
        assert resp.status_code == code, (target, resp.text)
        assert resp.json()["code"] == kind and resp.json()["detail"]
    assert "stale round" in fed.http.post(cases[3][0], content=cases[3][2], headers=good).json()["detail"]
    assert _fingerprint(fed, "p1") == before


def test_serving_after_the_run(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    fed, _, _ = done
    ds = fed.datasets["p0"]
    user = str(ds.train.user_ids[0])
    rated = {str(i) for u, i in zip(ds.train.user_ids.tolist(), ds.train.item_ids.tolist()) if u == user}
    key = {"X-API-Key": API_KEY}
    resp = fed.http.get(f"{fed.parties['p0'].url}/v1/users/{user}/recommendations", params={"k": 5}, headers=key)
    assert resp.status_code == 200, resp.text
    items = [it["item_id"] for it in resp.json()["items"]]
    assert len(items) == 5 and not set(items) & rated and resp.json()["fallback"] is None
    merged = fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", params={"k": 8}, headers=key)
    assert merged.status_code == 200, merged.text
    body = merged.json()
    assert body["unavailable"] == {} and body["partial"] is False and len(body["items"]) == 8
    scores = [it["score"] for it in body["items"]]
    assert scores == sorted(scores, reverse=True) and len({it["party_id"] for it in body["items"]}) >= 2
    missing = fed.http.get(f"{fed.coordinator.url}/v1/users/nobody/recommendations", headers=key)
    assert missing.status_code == 404 and "nobody" in missing.json()["detail"]
    assert fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations").status_code == 401


def test_repeated_step_is_answered_from_the_cache(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    fed, status, log = done
    last = ROUNDS - 1
    path = f"/v1/federation/runs/{status['run_id']}/rounds/{last}/steps/finish"
    original = [(sent, answered) for party, p, sent, answered in log if party == "p2" and p == path]
    assert len(original) == 1
    before = _fingerprint(fed, "p2")
    headers = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
    again = fed.http.post(f"{fed.parties['p2'].url}{path}?attempt=0", headers=headers, content=original[0][0])
    assert again.status_code == 200 and again.content == original[0][1]
    # the same step asked for another participant set: the cached answer, never a second masking of the value
    other = fed.http.post(f"{fed.parties['p2'].url}{path}?attempt=0", headers=headers,
                          content=pack_tree({"participants": ["p1", "p2"]}))
    assert other.status_code == 200 and other.content == original[0][1]
    layer1 = f"/v1/federation/runs/{status['run_id']}/rounds/{last}/steps/projection"
    first = [(b, a) for party, p, b, a in log if party == "p2" and p == layer1]
    assert first and all(fed.http.post(f"{fed.parties['p2'].url}{layer1}?attempt=0&layer={k}", headers=headers,
                                       content=b).status_code == 200 for k, (b, _) in enumerate(first[:1]))
    assert _fingerprint(fed, "p2") == before


# The tuned preset's distinctive features (services/evaluation/runner.py PRESETS["tuned"]): Adam
# amplifies last-bit differences of tiny gradients, so any order- or precision-dependent float sum
# between the HTTP parties and the in-process reference shows here within a few rounds.
ADAM_CONFIG: dict[str, Any] = {**TINY_CONFIG, "activation": "identity", "transform": False, "optimizer": "adam",
                               "lr": 0.01, "reg": 0.1, "weight_decay": 60.0, "reg_warmup": 10, "reg_bias": 0.1,
                               "thd": 1.0, "grad_scale": 0.05}
ADAM_ROUNDS = 25


def test_adam_weight_decay_run_is_bit_identical_to_inprocess(
    done: tuple[Federation, dict[str, Any], list[Any]],
) -> None:
    fed, _, _ = done
    config = {**ADAM_CONFIG, "patience": ADAM_ROUNDS}
    # its own seed: a masked run of a seed these parties used before starts from other values (privacy.md §7.1)
    run = fed.client.create_run(rounds=ADAM_ROUNDS, min_parties=2, seed=SEED + 1, config=config)
    status = fed.client.wait(run["run_id"], timeout=120)
    assert status["state"] == "completed", status["detail"]
    ref = run_reference(parties=fed.datasets, config=run_config(config, seed=SEED + 1, rounds=ADAM_ROUNDS),
                        rounds=ADAM_ROUNDS)
    assert [r["failures"] for r in status["rounds"]] == [{}] * ADAM_ROUNDS
    assert [r["metrics"]["loss"] for r in status["rounds"]] == [h.loss for h in ref.history]
    assert [r["metrics"]["test_rmse"] for r in status["rounds"]] == [h.rmse["test"] for h in ref.history]
