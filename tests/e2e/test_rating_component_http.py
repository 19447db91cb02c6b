"""The party's rating component over real HTTP: fitted at publish with no settings, served by default.

Two live parties and a live coordinator complete a run with no component settings. Each party's released
model carries its own component, and `POST /v1/predictions` at the party and at the coordinator answer
the harness's combination (`services.evaluation.rating_component`) fitted on that party's data, which
on the party's validation split is no worse than the federated model alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cli.localfed import ADMIN, API_KEY
from services.data.types import Ratings
from services.db.party_tables import ModelArtifact
from services.evaluation.rating_component import component_for
from services.verfedgnn.rating_component import ComponentConfig
from services.party.serving import ServingModel, served
from services.verfedgnn.types import PartyData, RatingTriples
from tests.support.federation import TINY_CONFIG, Federation, federation

ROUNDS, SEED = 3, 5
KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, dict[str, Any]]]:
    with federation(tmp_path_factory.mktemp("rating-component"), n_parties=2) as fed:
        run = fed.client.create_run(rounds=ROUNDS, min_parties=2, seed=SEED, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=300)
        assert status["state"] == "completed", status["detail"]
        yield fed, status


def _served_model(fed: Federation, pid: str) -> ServingModel:
    engine = create_engine(fed.party_db(pid))
    with Session(engine) as s:
        found = served(session=s)
        assert found is not None
        payload = s.scalar(select(ModelArtifact.payload).where(ModelArtifact.name == "serving_model",
                                                                ModelArtifact.version == found[0]))
    engine.dispose()
    assert payload is not None
    return ServingModel.from_bytes(payload)


def _triples(r: Ratings | None, users: dict[str, int], items: dict[str, int]) -> RatingTriples:
    if r is None:
        return RatingTriples.empty()
    return RatingTriples(np.array([users[str(u)] for u in r.user_ids.tolist()], np.int64),
                         np.array([items[str(i)] for i in r.item_ids.tolist()], np.int64),
                         r.ratings.astype(np.float32))


def _party_data(fed: Federation, pid: str, model: ServingModel) -> PartyData:
    """The party's ratings in its model's indices (its users and items in model order), as the party holds them."""
    ds = fed.datasets[pid]
    users = {str(u): k for k, u in enumerate(model.user_ids.tolist())}
    items = {str(i): k for k, i in enumerate(model.item_ids.tolist())}
    return PartyData(pid, len(users), len(items), len(items), _triples(ds.train, users, items),
                     _triples(ds.valid, users, items), _triples(ds.test, users, items))


def _pairs(fed: Federation, pid: str) -> list[dict[str, str]]:
    test = fed.datasets[pid].test
    assert test is not None
    return [{"user_id": str(u), "item_id": str(i)} for u, i in zip(test.user_ids.tolist(), test.item_ids.tolist())]


def test_a_run_with_no_settings_serves_the_harness_combination(done: tuple[Federation, dict[str, Any]]) -> None:
    fed, status = done
    expected: dict[tuple[str, str, str], float] = {}
    valid_sse, valid_count = 0.0, 0
    for pid in sorted(fed.parties):
        model = _served_model(fed, pid)
        assert model.run_id == status["run_id"]
        assert model.rating_component is not None, "a run with no settings serves the party's component"
        data = _party_data(fed, pid, model)
        fitted = component_for(model.without_component().scores, data, config=ComponentConfig(), seed=SEED)
        assert fitted is not None
        assert fitted.valid_rmse["combined"] <= fitted.valid_rmse["federated"] + 1e-12
        va = data.valid
        err = fitted.predict(users=va.users, items=va.items, base=model.without_component().scores(va.users, va.items),
                             low=1.0, high=5.0) - va.ratings
        valid_sse, valid_count = valid_sse + float(np.sum(err ** 2)), valid_count + len(va)
        te = data.test
        base = model.without_component().scores(te.users, te.items)
        harness = fitted.predict(users=te.users, items=te.items, base=base, low=1.0, high=5.0)
        assert not np.allclose(harness, base), "the combination is not the federated model alone"
        pairs = _pairs(fed, pid)
        r = fed.http.post(f"{fed.parties[pid].url}/v1/predictions", json={"pairs": pairs}, headers=KEY)
        assert r.status_code == 200, r.text
        got = np.array([p["rating"] for p in r.json()["predictions"]])
        np.testing.assert_allclose(got, harness, atol=1e-4)
        rmse_served = float(np.sqrt(np.mean((got - te.ratings) ** 2)))
        rmse_harness = float(np.sqrt(np.mean((harness - te.ratings) ** 2)))
        assert rmse_served == pytest.approx(rmse_harness, abs=5e-5)
        expected.update({(pid, p["user_id"], p["item_id"]): v for p, v in zip(pairs, harness.tolist())})
    # the coordinator sends each pair to the party it names and answers the same combination
    pairs = [{"party_id": pid, "user_id": u, "item_id": i} for pid, u, i in sorted(expected)][::5]
    r = fed.http.post(f"{fed.coordinator.url}/v1/predictions", json={"pairs": pairs}, headers=KEY)
    assert r.status_code == 200, r.text
    rows = r.json()["predictions"]
    assert len(rows) == len(pairs)
    got = np.array([row["rating"] for row in rows])
    np.testing.assert_allclose(got, [expected[(p["party_id"], p["user_id"], p["item_id"])] for p in pairs], atol=1e-4)
    # the release gate compares the served figure: the release's validation RMSE is the combination's
    r = fed.http.get(f"{fed.coordinator.url}/v1/releases", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text
    (release,) = [x for x in r.json() if x["run_id"] == status["run_id"]]
    assert release["valid_rmse"] == pytest.approx(np.sqrt(valid_sse / valid_count), abs=1e-5)
    assert release["metrics"]["valid_rmse"] == release["valid_rmse"]
    assert release["valid_rmse"] <= release["metrics"]["valid_rmse_trained"] + 1e-9
