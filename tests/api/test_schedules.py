"""Schedules over real HTTP: validation, an interval schedule firing across a coordinator restart, a skipped firing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cli.localfed import ADMIN, free_port
from cli.main import app as cli_app
from coordinator_api.main import create_app
from services.db.session import upgrade
from tests.support.federation import TINY_CONFIG, coordinator_settings
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}
RUN = {"rounds": 3, "min_parties": 2, "config": TINY_CONFIG}


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there: pre-flight fails at once


@pytest.fixture
def silent_party() -> Iterator[str]:
    """A socket that accepts connections and never answers: a run's pre-flight hangs on it until its timeout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _until(what: str, check: Callable[[], dict[str, Any] | None], deadline_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {deadline_s}s")


def _schedule(client: httpx.Client, schedule_id: str) -> dict[str, Any]:
    (row,) = [s for s in client.get("/v1/schedules").json() if s["schedule_id"] == schedule_id]
    return row  # type: ignore[no-any-return]


def test_schedule_validation_and_delete(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with (live_server(create_app(coordinator_settings(url))) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c):
        for pid in ("a", "b"):
            c.post("/v1/parties", json={"party_id": pid, "url": _dead_url(), "token": "t"}).raise_for_status()
        for body, field in [({"cron": "61 * * * *", **RUN}, "cron"), ({"cron": "not cron", **RUN}, "cron"),
                            ({"interval_seconds": 0, **RUN}, "interval_seconds"),
                            ({"interval_seconds": "5", **RUN}, "interval_seconds"),
                            ({**RUN}, "cron"), ({"cron": "0 3 * * *", "interval_seconds": 60, **RUN}, "cron"),
                            ({"interval_seconds": 60, "rounds": 0}, "rounds"),
                            ({"interval_seconds": 60, "config": {"dim": 0}}, "dim"),
                            ({"interval_seconds": 60, "preset": "nope"}, "preset"),
                            ({"interval_seconds": 60, "party_ids": ["ghost"]}, "party_ids"),
                            ({"interval_seconds": 60, "min_parties": 3}, "min_parties")]:
            resp = c.post("/v1/schedules", json=body)
            assert resp.status_code == 422 and resp.json()["field"] == field, (body, resp.text)
        assert c.get("/v1/schedules").json() == []
        created = c.post("/v1/schedules", json={"cron": "0 3 * * *", **RUN})
        assert created.status_code == 201, created.text
        row = created.json()
        assert row["run_settings"] == RUN and row["fire_count"] == 0 and row["next_fire_at"] is not None
        assert c.get("/v1/schedules", headers={"Authorization": "Bearer nope"}).status_code == 403
        assert c.delete(f"/v1/schedules/{row['schedule_id']}").status_code == 204
        assert c.get("/v1/schedules").json() == []
        assert c.delete(f"/v1/schedules/{row['schedule_id']}").status_code == 404


def test_cli_schedule_add_list_rm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    runner = CliRunner()
    with live_server(create_app(coordinator_settings(url))) as server:
        env = {"FEDREC_COORDINATOR_URL": server.url, "COORD_ADMIN_TOKEN": ADMIN}
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
            for pid in ("a", "b"):
                c.post("/v1/parties", json={"party_id": pid, "url": _dead_url(), "token": "t"}).raise_for_status()
        added = runner.invoke(cli_app, ["schedule", "add", "--cron", "0 3 * * *", "--rounds", "3"], env=env)
        assert added.exit_code == 0 and added.output.startswith("schedule "), added.output
        schedule_id = added.output.split()[1].rstrip(":")
        listed = runner.invoke(cli_app, ["schedule", "list"], env=env)
        assert listed.exit_code == 0 and schedule_id in listed.output and "cron 0 3 * * *" in listed.output
        bad = runner.invoke(cli_app, ["schedule", "add", "--cron", "99 * * * *"], env=env)
        assert bad.exit_code == 1 and "cron" in bad.output and "Traceback" not in bad.output
        assert len(bad.output.strip().splitlines()) == 1
        assert runner.invoke(cli_app, ["schedule", "rm", schedule_id], env=env).exit_code == 0
        gone = runner.invoke(cli_app, ["schedule", "rm", schedule_id], env=env)
        assert gone.exit_code == 1 and "does not exist" in gone.output
        assert "no schedules" in runner.invoke(cli_app, ["schedule", "list"], env=env).output


def test_interval_schedule_fires_across_a_restart_and_skips_while_a_run_is_active(
        database_url: str, silent_party: str) -> None:
    url = database_url  # SQLite and PostgreSQL: the schedule lives in the database the restart keeps
    upgrade(url, environment="coordinator")
    settings = coordinator_settings(url, max_retries=0, preflight_timeout_s=10.0, schedule_min_interval_s=1)
    with (live_server(create_app(settings)) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c):
        for pid in ("a", "b"):
            c.post("/v1/parties", json={"party_id": pid, "url": _dead_url(), "token": "t"}).raise_for_status()
        schedule_id = c.post("/v1/schedules", json={"interval_seconds": 2, **RUN}).json()["schedule_id"]
        first = _until("first firing", lambda: (row if (row := _schedule(c, schedule_id))["fire_count"] >= 1
                                                else None))
        assert first["last_outcome"] == f"started run {first['last_run_id']}"
        run = c.get(f"/v1/runs/{first['last_run_id']}").json()
        assert run["rounds_total"] == 3 and run["config"]["dim"] == TINY_CONFIG["dim"]  # the schedule's settings
        # The unreachable parties fail the run at pre-flight, so it is over before the coordinator stops.
        _until("first run to fail", lambda: (
            got if (got := c.get(f"/v1/runs/{first['last_run_id']}").json())["state"] == "failed" else None))
    # A new coordinator process on the same database rebuilds the schedule from its table.
    with (live_server(create_app(settings)) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c):
        after = _schedule(c, schedule_id)
        assert after["fire_count"] >= 1 and after["next_fire_at"] is not None
        second = _until("a firing after the restart", lambda: (
            row if (row := _schedule(c, schedule_id))["last_run_id"] not in (None, first["last_run_id"]) else None))
        assert second["fire_count"] > first["fire_count"]
        assert second["last_outcome"] == f"started run {second['last_run_id']}"
        assert second["last_fired_at"] > first["last_fired_at"]
        # Parties that accept and never answer keep the next run in pre-flight: the firing after it is skipped.
        for pid in ("a", "b"):
            c.patch(f"/v1/parties/{pid}", json={"url": silent_party}).raise_for_status()
        earlier = (first["last_run_id"], second["last_run_id"])
        skipped = _until("a skipped firing", lambda: (
            row if (row := _schedule(c, schedule_id))["last_outcome"].startswith("skipped")
            and row["last_run_id"] not in earlier else None))
        assert skipped["skipped_count"] >= 1
        active = skipped["last_run_id"]
        assert skipped["last_outcome"] == f"skipped: run {active} active"
        assert c.get(f"/v1/runs/{active}").json()["state"] in ("pending", "aligning", "paused")
        assert c.delete(f"/v1/schedules/{schedule_id}").status_code == 204
        c.post(f"/v1/runs/{active}/cancel")
