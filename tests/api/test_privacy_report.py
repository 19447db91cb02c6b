"""The run status carries the privacy report, and `fedrec privacy-report RUN` shows it (live coordinator)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.localfed import ADMIN, free_port
from cli.main import app
from coordinator_api.main import create_app
from services.coordinator.runner import train_config
from services.db.session import upgrade
from services.privacy.report import load_measured, privacy_report
from tests.support.federation import TINY_CONFIG, coordinator_settings
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[httpx.Client]:
    """A live coordinator with two registered (unreachable) parties."""
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with (live_server(create_app(coordinator_settings(url, max_retries=0))) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client):
        for pid in ("a", "b"):
            client.post("/v1/parties", json={"party_id": pid, "url": f"http://127.0.0.1:{free_port()}",
                                             "token": "t"}).raise_for_status()
        yield client


def test_run_status_and_cli_show_the_report(coord: httpx.Client) -> None:
    """Status field = privacy_report(the run's config); the CLI prints the same JSON and a readable table."""
    run = coord.post("/v1/runs", json={"rounds": 3, "min_parties": 2, "config": TINY_CONFIG}).json()
    expected = privacy_report(train_config(TINY_CONFIG, seed=run["seed"], rounds=3))
    status = coord.get(f"/v1/runs/{run['run_id']}").json()
    assert status["privacy_report"] == json.loads(json.dumps(expected))
    measured = status["privacy_report"]["measured"]
    assert measured["deanonymization_f1"]["0.8"] == load_measured()["figures"]["deanonymization"]["verfedgnn"]["0.8"]["f1"]
    # TINY_CONFIG's q differs from the reference preset's: the report says so
    assert not measured["settings_match"] and measured["differences"]

    base = ["privacy-report", run["run_id"], "--url", str(coord.base_url), "--token", ADMIN]
    as_json = CliRunner().invoke(app, [*base, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == status["privacy_report"]
    table = CliRunner().invoke(app, base, env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "fedpergnn" in table.output and "differ" in table.output
    missing = CliRunner().invoke(app, ["privacy-report", "nope", "--url", str(coord.base_url), "--token", ADMIN])
    assert missing.exit_code == 1 and "not_found" in missing.output
    coord.post(f"/v1/runs/{run['run_id']}/cancel")
