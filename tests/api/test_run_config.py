"""Typed run settings over real HTTP: presets, overrides, strict refusals that store nothing, a listing that survives."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from cli.localfed import ADMIN, free_port
from cli.main import app
from coordinator_api.main import create_app
from services.coordinator.run_config import default_run_config
from services.db.coordinator_tables import RunRow
from services.db.session import upgrade
from services.evaluation.runner import PRESETS, preset_values
from tests.support.federation import coordinator_settings
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    return url


@pytest.fixture
def coord(db_url: str) -> Iterator[httpx.Client]:
    """A live coordinator with two registered parties that nobody serves (runs wait at alignment)."""
    with (live_server(create_app(coordinator_settings(db_url, max_retries=0))) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client):
        for pid in ("a", "b"):
            client.post("/v1/parties", json={"party_id": pid, "url": f"http://127.0.0.1:{free_port()}",
                                             "token": "t"}).raise_for_status()
        yield client


def _create(coord: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Create a run, read what it stored, let it end (one active run at a time; its parties do not answer)."""
    resp = coord.post("/v1/runs", json=body)
    assert resp.status_code == 202, resp.text
    run: dict[str, Any] = resp.json()
    assert coord.post(f"/v1/runs/{run['run_id']}/cancel").status_code in (202, 409)  # 409: it already failed
    deadline = time.monotonic() + 30
    while coord.get(f"/v1/runs/{run['run_id']}").json()["state"] not in ("cancelled", "failed"):
        assert time.monotonic() < deadline, "the run did not stop within 30 s of its cancel"
        time.sleep(0.05)
    return run


def test_a_run_that_sets_nothing_trains_the_tuned_ranking_model(coord: httpx.Client) -> None:
    run = _create(coord, {})
    ranking = {k: v for k, v in preset_values("tuned-ranking", "gcn").items() if k != "rounds"}
    assert {k: run["config"][k] for k in ranking} == ranking  # what the ranking benchmark and the demo train
    assert run["config"] == default_run_config().config
    assert run["config"]["protocol"] == "verfedgnn" and run["config"]["secure_aggregation"] is True
    # no rounds given: the preset's cap; early stopping ends it sooner
    assert run["rounds_total"] == preset_values("tuned-ranking", "gcn")["rounds"] > run["config"]["patience"]


def test_a_preset_is_chosen_by_name_and_explicit_settings_override_it(coord: httpx.Client) -> None:
    run = _create(coord, {"preset": "tuned", "config": {"dim": 32, "dp_epsilon": 4}, "rounds": 7})
    assert run["config"]["dim"] == 32 and run["config"]["dp_epsilon"] == 4  # the caller's
    assert run["config"]["weight_decay"] == 60.0 and run["config"]["rank_weight"] == 0.0  # the preset's
    assert run["rounds_total"] == 7 and abs(run["privacy"]["differential_privacy"]["epsilon"] - 4) < 1e-3
    paper = _create(coord, {"preset": "verfedgnn-paper", "config": {"protocol": "verfedgnn"}})
    assert paper["config"]["dim"] == 6 and paper["config"]["optimizer"] == "adagrad" and paper["rounds_total"] == 400
    gat = _create(coord, {"config": {"model": "gat"}})  # the preset's per-model adjustments follow the model
    assert gat["config"]["dim"] == preset_values("tuned-ranking", "gat")["dim"] != 96
    fed = _create(coord, {"config": {"protocol": "fedpergnn", "ldp_scale": 0.3, "train": {"dim": 16}}})
    assert fed["config"]["ldp_scale"] == 0.3 and fed["config"]["train"]["dim"] == 16  # the caller's
    assert fed["config"]["train"]["grad_scale"] == 0.02 and fed["rounds_total"] == 1000  # tuned, FedPerGNN's scale


REFUSED: list[tuple[str, str]] = [
    ('{"config": {"bogus": 1}}', "bogus"),
    ('{"nope": 1}', "nope"),
    ('{"config": {"lr": true}}', "lr"),
    ('{"config": {"dp_epsilon": true}}', "dp_epsilon"),
    ('{"config": {"dim": "8"}}', "dim"),
    ('{"config": {"dp_epsilon": "8"}}', "dp_epsilon"),
    ('{"config": {"thd": NaN}}', "thd"),
    ('{"config": {"dp_budget_epsilon": Infinity}}', "dp_budget_epsilon"),
    ('{"config": {"lr": -Infinity}}', "lr"),
    ('{"config": {"dp_epsilon": 1e-300}}', "dp_epsilon"),
    ('{"rounds": true}', "rounds"),
    ('{"seed": "1"}', "seed"),
    ('{"preset": "fastest"}', "preset"),
    ('{"config": {"protocol": "nope"}}', "config"),
    ('{"config": {"rank_dims": 96}}', "config"),  # must stay below dim (96 in the preset)
    ('{"config": {"protocol": "fedpergnn", "dim": 8}}', "dim"),  # FedPerGNN's GNN settings go under `train`
    ('{"config": {"protocol": "fedpergnn", "train": {"lr": "0.1"}}}', "lr"),
]


@pytest.mark.parametrize(("body", "field"), REFUSED)
def test_bad_settings_get_422_naming_the_field_and_nothing_is_stored(coord: httpx.Client, body: str,
                                                                     field: str) -> None:
    resp = coord.post("/v1/runs", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert resp.json()["field"] == field, resp.json()
    listing = coord.get("/v1/runs")
    assert listing.status_code == 200 and listing.json() == []


def test_one_bad_stored_row_never_breaks_the_listing(coord: httpx.Client, db_url: str) -> None:
    good = _create(coord, {"config": {"dim": 16, "rank_dims": 8, "dp_epsilon": 2}})
    engine = create_engine(db_url)
    bad = {"n8": {"dp_epsilon": 1e-300}, "typo": {"dim": "x"}, "unknown": {"protocol": "other", "dim": 4}}
    with Session(engine) as session:  # rows as an older coordinator or a hand-edit may have left them
        for run_id, config in bad.items():
            session.add(RunRow(run_id=run_id, state="failed", detail="", config=config, party_ids=["a", "b"],
                               rounds_total=5, rounds_done=0, min_parties=2, seed=0, bytes_sent={},
                               bytes_received={}, cancel_requested=False))
        session.commit()
    engine.dispose()
    listing = coord.get("/v1/runs")
    assert listing.status_code == 200, listing.text
    by_id = {r["run_id"]: r for r in listing.json()}
    assert set(by_id) == {good["run_id"], *bad}
    assert by_id[good["run_id"]]["privacy"]["differential_privacy"]["epsilon"] is not None
    for run_id, config in bad.items():
        assert "unreadable" in by_id[run_id]["privacy"] and by_id[run_id]["config"] == config
        one = coord.get(f"/v1/runs/{run_id}")
        assert one.status_code == 200 and "unreadable" in one.json()["privacy"]


def test_openapi_shows_every_setting_with_a_description(coord: httpx.Client) -> None:
    schemas = coord.get("/openapi.json").json()["components"]["schemas"]
    for name in ("VerFedGNNRunConfig", "FedPerGNNRunConfig", "FedPerGNNTrainSettings"):
        props = schemas[name]["properties"]
        assert all(p.get("description") for p in props.values()), name
    assert len(schemas["VerFedGNNRunConfig"]["properties"]) > 30
    assert schemas["VerFedGNNRunConfig"]["properties"]["dim"]["default"] == 96  # the default preset's value
    preset = schemas["TrainingRunCreate"]["properties"]["preset"]["anyOf"][0]
    assert set(preset["enum"]) == set(PRESETS)  # every preset is offered by name


def test_cli_create_takes_a_preset_and_overrides(coord: httpx.Client) -> None:
    base = str(coord.base_url).rstrip("/")
    args = ["coordinator", "create", "--url", base, "--token", ADMIN, "--preset", "tuned", "--config", '{"dim": 24}']
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run = coord.get("/v1/runs").json()[0]
    assert run["config"]["dim"] == 24 and run["config"]["rank_weight"] == 0.0 and run["rounds_total"] == 1000
    assert coord.post(f"/v1/runs/{run['run_id']}/cancel").status_code in (202, 409)
