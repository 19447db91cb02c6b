"""Coordinator API over real HTTP: registry, runs (create/status/pause/cancel), auth and bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.localfed import ADMIN, free_port
from coordinator_api.main import create_app
from services.db.session import upgrade
from tests.support.federation import TINY_CONFIG, coordinator_settings, federation
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[httpx.Client]:
    """A live coordinator with its own migrated SQLite database and no parties."""
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    with (live_server(create_app(coordinator_settings(url, max_retries=0))) as server,
          httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client):
        yield client


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_health_and_auth(coord: httpx.Client) -> None:
    assert coord.get("/health").json()["status"] == "ok"
    assert coord.get("/v1/parties", headers={"Authorization": ""}).status_code == 401
    resp = coord.get("/v1/runs", headers={"Authorization": "Bearer nope"})  # one dialect: wrong credential → 403
    assert resp.status_code == 403 and "admin" in resp.json()["detail"]


def test_party_registry_crud_and_bad_input(coord: httpx.Client) -> None:
    created = coord.post("/v1/parties", json={"party_id": "a", "url": "http://127.0.0.1:1", "token": "secret"})
    assert created.status_code == 201 and "token" not in created.json()
    dup = coord.post("/v1/parties", json={"party_id": "a", "url": "http://127.0.0.1:2", "token": "t"})
    assert dup.status_code == 409 and dup.json()["field"] == "party_id"
    bad = coord.post("/v1/parties", json={"party_id": "b", "url": "ftp://host/x", "token": "t"})
    assert bad.status_code == 422 and bad.json()["field"] == "url"
    spaced = coord.post("/v1/parties", json={"party_id": "b c", "url": "http://x:1", "token": "t"})
    assert spaced.status_code == 422 and spaced.json()["field"] == "party_id"
    assert coord.post("/v1/parties", json={"party_id": "b", "url": "http://x:1", "token": "t", "x": 1}).status_code == 422
    patched = coord.patch("/v1/parties/a", json={"url": "http://127.0.0.1:3", "enabled": False})
    assert patched.json() == {"party_id": "a", "url": "http://127.0.0.1:3", "role": "ratings", "enabled": False,
                              "tls_name": None}
    assert [p["party_id"] for p in coord.get("/v1/parties").json()] == ["a"]
    assert coord.delete("/v1/parties/a").status_code == 204
    missing = coord.get("/v1/parties/a")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_run_validation(coord: httpx.Client) -> None:
    none = coord.post("/v1/runs", json={"rounds": 2, "min_parties": 2})
    assert none.status_code == 422 and none.json()["field"] == "min_parties"
    cfg = coord.post("/v1/runs", json={"rounds": 2, "config": {"dim": 0}})
    assert cfg.status_code == 422 and cfg.json()["field"] == "dim"
    unknown = coord.post("/v1/runs", json={"rounds": 2, "party_ids": ["ghost"]})
    assert unknown.status_code == 422 and "ghost" in unknown.json()["detail"]
    zero = coord.post("/v1/runs", json={"rounds": 0})
    assert zero.status_code == 422 and zero.json()["field"] == "rounds"
    assert coord.get("/v1/runs/doesnotexist").status_code == 404
    assert coord.get("/v1/runs").json() == []


def test_a_run_whose_parties_are_unreachable_fails_at_once_naming_them(coord: httpx.Client) -> None:
    for pid in ("a", "b"):
        coord.post("/v1/parties", json={"party_id": pid, "url": _dead_url(), "token": "t"}).raise_for_status()
    run = coord.post("/v1/runs", json={"rounds": 3, "min_parties": 2, "config": TINY_CONFIG})
    assert run.status_code == 202 and run.json()["state"] == "pending"
    privacy = run.json()["privacy"]  # every mechanism on by default, its parameters in the record
    assert privacy["projection"]["enabled"] and privacy["projection"]["q_ratio"] == TINY_CONFIG["q_ratio"]
    assert privacy["quantization"]["enabled"] and privacy["quantization"]["r"] == 3.0
    assert privacy["quantization"]["clip_bound"] == 0.5 and privacy["participation"]["alpha"] == 1.0
    run_id = run.json()["run_id"]
    for _ in range(400):
        status = coord.get(f"/v1/runs/{run_id}").json()
        if status["state"] == "failed":
            break
        time.sleep(0.05)
    assert status["state"] == "failed", status
    assert "0 of 2 parties can take part, min_parties=2" in status["detail"]
    assert set(status["excluded"]) == {"a", "b"} and all("unreachable" in r for r in status["excluded"].values())
    assert coord.post(f"/v1/runs/{run_id}/cancel").status_code == 409  # it has ended


def test_registry_change_applies_to_a_running_run(tmp_path: Path) -> None:
    with federation(tmp_path, n_parties=3) as fed:
        cc = fed.client
        good = fed.parties["p2"].url
        run_id = cc.create_run(rounds=40, min_parties=2, seed=1, config={**TINY_CONFIG, "patience": 40})["run_id"]
        for _ in range(1200):  # p2 re-pointed to a dead address once the run trains: left out of the next rounds
            if cc.run(run_id)["rounds_done"] >= 1:
                break
            time.sleep(0.05)
        cc.http.patch(f"{cc.url}/v1/parties/p2", headers=cc._h(), json={"url": _dead_url()}).raise_for_status()
        for _ in range(1200):
            if any("p2" in r["failures"] for r in cc.run(run_id)["rounds"]):
                break
            time.sleep(0.05)
        cc.http.patch(f"{cc.url}/v1/parties/p2", headers=cc._h(), json={"url": good}).raise_for_status()
        done = cc.wait(run_id, timeout=240)
    assert done["state"] == "completed" and done["rounds_done"] == 40, done["detail"]
    missed = [r["round_index"] for r in done["rounds"] if "p2" in r["failures"]]
    assert missed and all(r["participants"] == ["p0", "p1"] for r in done["rounds"] if r["round_index"] in missed)
    assert done["rounds"][-1]["participants"] == ["p0", "p1", "p2"]  # back once re-pointed


def test_run_over_its_privacy_budget_is_refused_and_a_fitting_one_reports_its_epsilon(coord: httpx.Client) -> None:
    for pid in ("a", "b"):
        coord.post("/v1/parties", json={"party_id": pid, "url": _dead_url(), "token": "t"}).raise_for_status()
    over = coord.post("/v1/runs", json={"rounds": 2, "config": {"dp_epsilon": 8, "dp_budget_epsilon": 3}})
    assert over.status_code == 409 and over.json()["code"] == "privacy_budget_exhausted", over.text
    assert over.json()["budget_epsilon"] == 3 and abs(over.json()["epsilon_required"] - 8) < 1e-3
    no_dp = coord.post("/v1/runs", json={"rounds": 2, "config": {"dp_budget_epsilon": 3}})
    assert no_dp.status_code == 409 and no_dp.json()["epsilon_required"] is None  # no DP: no finite ε at all
    assert coord.get("/v1/runs").json() == []  # nothing was created
    ok = coord.post("/v1/runs", json={"rounds": 2, "config": {**TINY_CONFIG, "dp_epsilon": 2, "dp_budget_epsilon": 3}})
    assert ok.status_code == 202, ok.text
    dp = ok.json()["privacy"]["differential_privacy"]
    assert abs(dp["epsilon"] - 2) < 1e-3 and dp["budget"] == {"epsilon": 3, "delta": 1e-5}
    assert ok.json()["privacy"]["epsilon_spent"] == 0.0 and ok.json()["privacy"]["secure_aggregation"]["enabled"]
    run_id = ok.json()["run_id"]
    for _ in range(400):  # its parties are unreachable: the pre-flight ends it
        if coord.get(f"/v1/runs/{run_id}").json()["state"] == "failed":
            break
        time.sleep(0.05)
    assert coord.get(f"/v1/runs/{run_id}").json()["state"] == "failed"


def test_ready_reports_the_database_schema(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    app = create_app(coordinator_settings(url))
    with live_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        ready = client.get("/ready")  # no credential: a load balancer's probe
        assert ready.status_code == 200 and ready.json()["status"] == "ready" and ready.json()["detail"] is None
        engine = create_engine(url)
        with engine.begin() as connection:  # as if an older release's schema were left in place
            connection.execute(text("UPDATE alembic_version_coordinator SET version_num = 'older'"))
        engine.dispose()
        stale = client.get("/ready")
        assert stale.status_code == 503 and stale.json()["status"] == "unavailable"
        assert "database schema at older" in stale.json()["detail"] and "run migrations" in stale.json()["detail"]
        assert client.get("/health").status_code == 200  # alive, though not ready
        app.state.manager.shutdown()  # what the lifespan does on the way out: no more runs are taken
        stopping = client.get("/ready")
        assert stopping.status_code == 503 and stopping.json()["detail"] == "run manager shutting down"
