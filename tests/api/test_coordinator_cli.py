"""`fedrec coordinator ...` against a live coordinator and live parties: create --wait's exit status,
--party-ids, and the runs / parties / remove-party tables."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.localfed import ADMIN, COORD_TOKEN
from cli.main import app
from coordinator_api.main import create_app
from services.db.session import upgrade
from tests.support.federation import TINY_CONFIG, coordinator_settings, federation
from tests.support.servers import live_server


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["coordinator", *args, "--token", ADMIN])
    return result.exit_code, result.output


@pytest.mark.slow
def test_create_wait_exit_status_and_party_ids(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=3) as fed:
        url = ["--url", fed.coordinator.url]
        code, output = _cli("create", *url, "--rounds", "1", "--party-ids", "p0, p1", "--wait",
                            "--config", json.dumps(TINY_CONFIG))
        assert code == 0, output
        run_id = output.split()[1]
        assert fed.client.run(run_id)["party_ids"] == ["p0", "p1"]  # p2 is registered but not picked
        code, output = _cli("runs", *url)
        assert code == 0 and run_id in output and "completed" in output and "p0,p1" in output

        # A party registered with a credential it does not accept: register-party warns, the pre-flight leaves
        # it out, the run ends failed below min_parties, and `create --wait` says why in one line and exits 1.
        code, output = _cli("register-party", "p1", fed.parties["p1"].url, *url, "--party-token", "not-the-token")
        assert code == 0 and "warning: party p1 refused the coordinator's credential" in output, output
        code, output = _cli("create", *url, "--rounds", "1", "--party-ids", "p0,p1", "--wait",
                            "--config", json.dumps(TINY_CONFIG))
        assert code == 1, output
        last = output.strip().splitlines()[-1]
        assert last.startswith("error run ") and " failed: " in last and "run_failed" in last, output
        assert "p1 pre-flight: refused the coordinator's credential" in last, output
        assert COORD_TOKEN not in output and "Traceback" not in output


def test_create_wait_exits_non_zero_when_the_run_is_cancelled(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=2) as fed:
        coordinator_url = fed.coordinator.url
        headers = {"Authorization": f"Bearer {ADMIN}"}

        def cancel_when_created() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                listed = httpx.get(f"{coordinator_url}/v1/runs", headers=headers).json()
                if listed:
                    httpx.post(f"{coordinator_url}/v1/runs/{listed[0]['run_id']}/cancel", headers=headers)
                    return
                time.sleep(0.1)

        canceller = threading.Thread(target=cancel_when_created)
        canceller.start()
        code, output = _cli("create", "--url", coordinator_url, "--rounds", "500", "--wait", "--wait-timeout", "60",
                            "--config", json.dumps({**TINY_CONFIG, "patience": 500}))
        canceller.join(timeout=40)
    assert code == 1, output
    assert output.strip().splitlines()[-1].startswith("error run ") and "cancelled" in output


def test_parties_table_and_remove_party(coordinator_url: str) -> None:
    url = ["--url", coordinator_url]
    assert _cli("parties", *url) == (0, "no parties registered\n")
    assert _cli("runs", *url) == (0, "no runs\n")
    for pid, port in (("books", 9001), ("zine", 9002)):
        assert _cli("register-party", pid, f"http://127.0.0.1:{port}", *url, "--party-token", "t")[0] == 0
    code, output = _cli("parties", *url)
    assert code == 0 and "books" in output and "http://127.0.0.1:9002" in output and "ratings" in output
    assert _cli("remove-party", "books", *url) == (0, "party books removed\n")
    code, output = _cli("parties", *url)
    assert "books" not in output and "zine" in output
    code, output = _cli("remove-party", "books", *url)
    assert code == 1 and output.count("\n") == 1 and "not_found" in output


def test_create_refuses_bad_config_json_in_one_line(coordinator_url: str) -> None:
    code, output = _cli("create", "--url", coordinator_url, "--config", "{dim: 8}")
    assert code == 1 and output.startswith("error --config is not JSON") and output.count("\n") == 1


def test_create_warm_start_without_an_active_release_is_refused_in_one_line(coordinator_url: str) -> None:
    code, output = _cli("create", "--url", coordinator_url, "--warm-start")
    assert code == 1 and output.count("\n") == 1, output
    assert "warm_start_refused" in output and "none is active" in output, output


@pytest.fixture
def coordinator_url(tmp_path: Path) -> Iterator[str]:
    """A live coordinator (own migrated SQLite database, no parties)."""
    db = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(db, environment="coordinator")
    with live_server(create_app(coordinator_settings(db, max_retries=0))) as server:
        yield server.url
