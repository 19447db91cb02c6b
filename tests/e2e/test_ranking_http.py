"""The ranking objective over real HTTP: nothing per-item crosses, and the served top-K is the harness's list."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cli.localfed import ADMIN, API_KEY
from models.vertical import build_public
from services.evaluation import ranking, topk
from services.evaluation import ranking_experiment as rx
from services.evaluation.served import served_all
from services.verfedgnn.config import TrainConfig, model_config, run_config
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.reference import party_datas
from services.verfedgnn.rounds import InProcessFederation
from tests.e2e.test_federation_http import Recorder, _arrays
from tests.support.federation import TINY_CONFIG, Federation, federation

ROUNDS, SEED, K = 6, 3, 10
CONFIG: dict[str, Any] = {**TINY_CONFIG, "rank_weight": 1.0, "rank_dims": 1}


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Any], list[Any]]]:
    """A completed run with the ranking objective, every federation body recorded."""
    log: list[tuple[str, str, bytes, bytes]] = []
    with federation(tmp_path_factory.mktemp("rank"), wrap=lambda pid, app: Recorder(pid, app, log)) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=3, seed=SEED, config=CONFIG)
        status = fed.client.wait(run["run_id"], timeout=120)
        assert status["state"] == "completed", status["detail"]
        yield fed, status, log


def test_no_body_carries_a_negative_item_id_or_an_item_count(
    done: tuple[Federation, dict[str, Any], list[Any]],
) -> None:
    fed, status, log = done
    datas = party_datas(fed.datasets)
    n, d = status["n_users"], CONFIG["dim"]
    q = round(CONFIG["q_ratio"] * n)
    per_item = {x.n_items for x in datas.values()} | {len(x.train) for x in datas.values()}
    assert not per_item & {n, q, d, 1, 2, 3}, "sizes must be distinguishable for this check to mean anything"
    # the ranking objective adds no public parameter: uploads carry exactly the rating model's gradients
    arrays = build_public(config=model_config(TrainConfig(**TINY_CONFIG)), n_users=n, seed=0).arrays()
    # secure aggregation (the default): one masked vector of the public gradients, the loss, 3 × 3 error sums
    # and the validation ranking sums (Σ NDCG@10, users)
    masked_size = sum(a.size for a in arrays.values()) + 1 + 3 * 3 + 2
    seen_uploads = 0
    for party, path, sent, answered in log:
        for body in (sent, answered):
            assert b"item-" not in body, f"an item id crossed at {path}"
        names = _arrays(party, path, sent, answered)
        for name, shape in names:
            assert not set(shape) & per_item, f"{path}: array {name} {shape} has a per-item or per-rating axis"
        if path.endswith("/steps/finish"):
            assert names == [("masked", (masked_size,))]
            seen_uploads += 1
    assert seen_uploads == ROUNDS * len(datas)


def test_served_top_k_is_the_harness_list(done: tuple[Federation, dict[str, Any], list[Any]]) -> None:
    """The coordinator's fan-out serves exactly the merged list of the harness's model (`topk.train_ranked`) of
    the run's best validation round (the round its release holds: a ranking run's best validation NDCG@10), blended
    at each party with its local EASE as the harness blends it (`services.evaluation.served`); the release carries
    each party's value report."""
    fed, status, _ = done
    best = min((-r["metrics"]["valid_ndcg@10"], r["round_index"]) for r in status["rounds"])[1]
    config = run_config(CONFIG, seed=SEED, rounds=ROUNDS).model_copy(update={"patience": ROUNDS})
    assert config.secure_aggregation, "a coordinator run's default (secure aggregation) is what is compared"
    datas = party_datas(fed.datasets)
    view = topk.ranking_view(datas)
    last: dict[str, Any] = {}

    def on_model(t: int, scores: dict[str, Any]) -> None:
        if t == best:
            last.update(scores)

    run = topk.train_ranked(datas, config=config, protocol="federated", on_model=on_model)
    assert run.result.rounds_run == ROUNDS and set(last) == set(view.party_ids)
    assert set(run.result.per_party) == set(view.party_ids)  # each party's own figures under masking
    fed_only = topk.merged_top(view, last, K)
    blended = served_all(datas, last, seed=SEED)
    top = topk.merged_top(view, {p: b.scores for p, b in blended.items()}, K)
    assert not np.array_equal(fed_only, top), "the blend must change some list for this check to mean anything"
    # the plain construction (run seed everywhere, no masking) trains another model: the check can tell
    coord = CoordinatorTrainer(config=config, n_users=view.seen.shape[0], global_mean=rx.global_mean(datas),
                               item_counts={p: d.n_items for p, d in datas.items()})
    plain = InProcessFederation(coordinator=coord, parties={p: PartyTrainer(config=config, data=d, seed=config.seed)
                                                            for p, d in datas.items()})
    for t in range(ROUNDS):
        plain.run_round(t)
    other = topk.merged_top(view, {p: topk.party_scores(t.serving_model()) for p, t in plain.parties.items()}, K)
    assert not np.array_equal(other, top)
    users = sorted(set.intersection(*[{str(u) for s in (ds.train, ds.valid, ds.test) if s is not None
                                       for u in s.user_ids.tolist()} for ds in fed.datasets.values()]))
    items = [(p, it) for p in view.party_ids
             for it in sorted({str(i) for s in (fed.datasets[p].train, fed.datasets[p].valid, fed.datasets[p].test)
                               if s is not None for i in s.item_ids.tolist()})]
    served: dict[int, list[int]] = {}
    col = {pair: c for c, pair in enumerate(items)}
    for row, user in enumerate(users):
        resp = fed.http.get(f"{fed.coordinator.url}/v1/users/{user}/recommendations", params={"k": K},
                            headers={"X-API-Key": API_KEY})
        assert resp.status_code == 200, resp.text
        served[row] = [col[(it["party_id"], it["item_id"])] for it in resp.json()["items"]]
        harness = [int(c) for c in top[row] if c >= 0]
        assert served[row] == harness, user
    assert len(served) == len(users) > 10
    figures = ranking.evaluate_lists(served, view.relevant, n_items=len(items), train_counts=view.train_counts)
    assert figures == ranking.evaluate_lists(ranking.lists_from_top(top, range(len(users))), view.relevant,
                                             n_items=len(items), train_counts=view.train_counts)
    # the value report: each party's validation figures per slice, as the harness's fit computes them
    release = fed.http.get(f"{fed.coordinator.url}/v1/releases/release-1",
                           headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert release["run_id"] == status["run_id"]
    expected = {p: [f.as_dict() for f in b.figures if f.users >= 10] for p, b in blended.items()}
    assert any(expected.values()), "too few validation users for a report: the check would mean nothing"
    got = release["value_report"]
    assert set(got) == {p for p, rows in expected.items() if rows}
    for p, rows in got.items():
        assert [r["slice"] for r in rows] == [r["slice"] for r in expected[p]]
        for r, e in zip(rows, expected[p]):
            assert r["users"] == e["users"]
            for key in ("local", "federated", "served"):
                assert r[f"{key}_ndcg10"] == pytest.approx(e[f"{key}_ndcg@10"], abs=1e-6)
