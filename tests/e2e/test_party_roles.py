"""A party with two API workers (role all) trains correctly while apps load its serving endpoint.

Real processes: party p0 runs `python -m party_api` with PARTY_WORKERS=2 (two API workers beside
one federation process on loopback), p1 one process, and a coordinator that never retries a step
(COORD_MAX_RETRIES=0), so a step landing on a worker without the run's state fails its round.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import pytest

from cli.localfed import (
    API_KEY,
    COORD_TOKEN,
    CoordinatorClient,
    Proc,
    party_proc,
)
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG, process_federation, tiny_parties
from tests.support.relay import FreshConnectionRelay
from tests.support.servers import LiveServer

pytestmark = [pytest.mark.slow]
ROUNDS = 3
FORWARD_ROUTE = "/v1/federation/{path:path}"  # the API workers' forwarding route (the federation process has none)


@dataclass
class Setup:
    """The running processes, the coordinator client and the aligned users of p0."""

    parties: dict[str, Proc]
    coordinator: Proc
    client: CoordinatorClient
    users: list[str]


def _train(client: CoordinatorClient, seed: int) -> dict[str, Any]:
    run = client.create_run(rounds=ROUNDS, min_parties=2, seed=seed, config=TINY_CONFIG)
    return client.wait(run["run_id"], timeout=600)


def _entries(log: Path) -> list[dict[str, Any]]:
    """A service's JSON log lines."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def _assert_clean(status: dict[str, Any], setup: Setup) -> None:
    """Completed; every round played once, at attempt 0, by both parties; no federation call refused."""
    assert status["state"] == "completed", status["detail"]
    assert status["rounds_done"] == ROUNDS
    for record in status["rounds"]:
        assert sorted(record["participants"]) == ["p0", "p1"] and record["failures"] == {}, record
    # A failed round is played again (attempt + 1) and only the last attempt is listed: read the log.
    started = [e for e in _entries(setup.coordinator.log)
               if e.get("message") == "round started" and e.get("run_id") == status["run_id"]]
    assert [(e["round"], e["attempt"]) for e in started] == [(t, 0) for t in range(ROUNDS)]
    refused = [(e["route"], e["status"]) for e in _entries(setup.parties["p0"].log)
               if e.get("message") == "request" and str(e.get("route")).startswith("/v1/federation")
               and e["status"] >= 400]
    assert refused == []


def _forwarding_workers(log: Path) -> set[int]:
    """Process ids of the API workers that forwarded federation calls (their JSON request log lines)."""
    return {int(e["pid"]) for e in _entries(log) if e.get("message") == "request" and e.get("route") == FORWARD_ROUTE}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """p0 with two API workers, p1 with one process, a coordinator without step retries; one run published."""
    root = tmp_path_factory.mktemp("roles")
    datasets = tiny_parties(2)
    with process_federation(root, datasets,
                            party=lambda pid, at: party_proc(pid, at, workers=2 if pid == "p0" else 1),
                            coordinator_env={"COORD_MAX_RETRIES": "0", "COORD_PAUSE_POLL_S": "0.2",
                                             "COORD_REQUEST_TIMEOUT_S": "60"}) as fed:
        users = sorted({str(u) for u in datasets["p0"].train.user_ids.tolist()})
        ready = Setup(fed.parties, fed.coordinator, fed.client, users)
        _assert_clean(_train(fed.client, seed=1), ready)  # a published model for the serving load below
        yield ready


class Load:
    """Threads asking the 2-worker party for recommendations until stopped; one reuses its connection,
    one opens a new connection per request (so both workers serve)."""

    def __init__(self, url: str, users: list[str]) -> None:
        self.url, self.users = url, users
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(fresh,), daemon=True) for fresh in (False, True)]

    def _loop(self, fresh: bool) -> None:
        headers = {"X-API-Key": API_KEY, **({"Connection": "close"} if fresh else {})}
        with httpx.Client(timeout=30, headers=headers) as http:
            i = 0
            while not self._stop.is_set():
                user = self.users[i % len(self.users)]
                i += 1
                try:
                    answer = http.get(f"{self.url}/v1/users/{user}/recommendations", params={"k": 10})
                    outcome = None if answer.status_code == 200 else f"{user}: HTTP {answer.status_code} {answer.text}"
                except httpx.HTTPError as exc:
                    outcome = f"{user}: {type(exc).__name__} {exc}"
                with self._lock:
                    if outcome is None:
                        self.ok += 1
                    else:
                        self.failed.append(outcome)

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def test_a_run_completes_while_apps_load_the_serving_endpoint_of_a_two_worker_party(setup: Setup) -> None:
    with Load(setup.parties["p0"].url, setup.users) as load:
        status = _train(setup.client, seed=2)
    _assert_clean(status, setup)
    assert load.failed == [], load.failed[:5]
    assert load.ok > 0


def test_every_step_on_a_new_connection_still_trains(setup: Setup) -> None:
    """Not connection luck: each federation step reaches p0 on a new connection, so on either worker."""
    p0 = setup.parties["p0"]
    fresh = FreshConnectionRelay(p0.url)
    relay = LiveServer(fresh).start()
    before = _forwarding_workers(p0.log)
    try:
        setup.client.register("p0", relay.url)
        status = _train(setup.client, seed=3)
    finally:
        setup.client.register("p0", p0.url)
        relay.stop()
    _assert_clean(status, setup)
    assert fresh.forwarded >= 4 * ROUNDS  # PSI, configure and every round step went through it
    # Both API workers forwarded federation steps: the run's state was reached from either.
    assert len(_forwarding_workers(p0.log)) == 2, before


def _federation_children(launcher: int) -> list[int]:
    """Process ids of the federation processes a launcher started (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
        if ppid == launcher and b"federation" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _until(check: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return value


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_the_launcher_restarts_its_federation_process_and_takes_it_down_when_killed(tmp_path: Path) -> None:
    party = party_proc("solo", tmp_path, workers=2)
    step = f"{party.url}/v1/federation/runs/r1/psi/start"
    headers = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}
    try:
        party.start(timeout=180)
        assert party.popen is not None
        with httpx.Client(timeout=30, headers=headers) as http:
            assert http.post(step).status_code == 200
            [child] = _federation_children(party.popen.pid)
            os.kill(child, signal.SIGKILL)
            down = http.post(step)
            assert down.status_code == 503 and down.json()["code"] == "federation_unavailable"
            _until(lambda: http.post(step).status_code == 200, "the federation process was not restarted")
        [restarted] = _federation_children(party.popen.pid)
        assert restarted != child
        party.kill()  # SIGKILL: no cleanup in the launcher; the kernel signals the child
        _until(lambda: not Path(f"/proc/{restarted}").exists()
               or "Z" in Path(f"/proc/{restarted}/stat").read_text().rsplit(")", 1)[1].split()[:1],
               "the federation process outlived its launcher", timeout=60)
    finally:
        if party.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(party.popen.pid, signal.SIGKILL)  # the API workers (own session, see Proc.spawn)
