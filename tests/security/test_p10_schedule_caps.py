"""P10: schedules had no cap on number or rate (30 one-second schedules made 451 runs in 21 s), a cron that
never fires was accepted, and `GET /v1/runs` listed every run at once. Now a coordinator keeps at most
COORD_MAX_SCHEDULES schedules (409), none firing more often than COORD_SCHEDULE_MIN_INTERVAL_S (422), a cron
with no matching date is refused (422), and the run list is paged (`limit` ≤ 1000, `offset`).
Real HTTP against a live coordinator."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from cli.localfed import ADMIN, free_port
from coordinator_api.main import create_app
from services.config import CoordinatorSettings
from services.db.session import upgrade
from tests.support.federation import TINY_CONFIG, coordinator_settings
from tests.support.servers import live_server

AUTH = {"Authorization": f"Bearer {ADMIN}"}
RUN = {"rounds": 1, "min_parties": 2, "config": TINY_CONFIG}


def _coordinator(tmp_path: Path, **settings: object) -> CoordinatorSettings:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(url, environment="coordinator")
    return coordinator_settings(url, **settings)


def test_schedules_are_capped_in_number_and_rate(tmp_path: Path) -> None:
    settings = _coordinator(tmp_path, max_schedules=3)
    with live_server(create_app(settings)) as server, \
            httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        for pid in ("a", "b"):
            c.post("/v1/parties", json={"party_id": pid, "url": f"http://127.0.0.1:{free_port()}",
                                        "token": "t" * 32}).raise_for_status()
        fast = c.post("/v1/schedules", json={"interval_seconds": 1, **RUN})
        assert fast.status_code == 422 and fast.json()["field"] == "interval_seconds", fast.text
        assert "COORD_SCHEDULE_MIN_INTERVAL_S" in fast.json()["detail"]
        for never in ("0 0 31 2 *", "0 0 30 2 *", "0 12 31 4,6,9,11 *"):
            r = c.post("/v1/schedules", json={"cron": never, **RUN})
            assert r.status_code == 422 and r.json()["field"] == "cron" and "never fires" in r.json()["detail"], r.text
        assert c.post("/v1/schedules", json={"cron": "0 0 29 2 *", **RUN}).status_code == 201  # leap days come
        for _ in range(2):
            assert c.post("/v1/schedules", json={"interval_seconds": 3600, **RUN}).status_code == 201
        over = c.post("/v1/schedules", json={"interval_seconds": 3600, **RUN})
        assert over.status_code == 409 and "COORD_MAX_SCHEDULES" in over.json()["detail"], over.text
        assert len(c.get("/v1/schedules").json()) == 3  # nothing stored by the refusals


def test_the_run_list_is_paged(tmp_path: Path) -> None:
    settings = _coordinator(tmp_path, preflight_timeout_s=5.0, max_retries=0)
    with live_server(create_app(settings)) as server, \
            httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        for pid in ("a", "b"):
            c.post("/v1/parties", json={"party_id": pid, "url": f"http://127.0.0.1:{free_port()}",
                                        "token": "t" * 32}).raise_for_status()
        made = []
        for _ in range(3):  # unreachable parties: each run fails at pre-flight, and the next may start
            run = c.post("/v1/runs", json=RUN).json()["run_id"]
            made.append(run)
            deadline = time.monotonic() + 60
            while c.get(f"/v1/runs/{run}").json()["state"] not in ("failed", "completed", "cancelled"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert [r["run_id"] for r in c.get("/v1/runs").json()] == made[::-1]
        page = c.get("/v1/runs", params={"limit": 2}).json()
        rest = c.get("/v1/runs", params={"limit": 2, "offset": 2}).json()
        assert [r["run_id"] for r in page + rest] == made[::-1] and len(page) == 2
        for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
            r = c.get("/v1/runs", params=bad)
            assert r.status_code == 422, r.text
