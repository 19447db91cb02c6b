"""Two replicas of one party's API behind HAProxy (docker/haproxy.cfg, run as shipped) on one PostgreSQL database.

Processes: replicas `a` and `b` of party "books" (`fedrec party serve`, same settings and credentials,
one PostgreSQL schema), HAProxy in front of them, party "movies" and a coordinator. The coordinator
reaches "books" through HAProxy, whose config sends federation calls and erasures to replica `a` (`b`
only while `a` is down) and spreads everything else over both.
- a real one-round run publishes a model: both replicas serve it (a at once, b within its refresh);
- an erasure through HAProxy: both replicas answer 404 for the user;
- SIGKILL of replica `a` under a continuous load of recommendation requests through HAProxy: no
  request fails, HAProxy takes `a` out of rotation within its check interval, requests keep
  succeeding, and an erasure through HAProxy now reaches `b`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

import httpx
import pytest

from cli.localfed import (
    ADMIN,
    API_KEY,
    CoordinatorClient,
    Proc,
    coordinator_proc,
    free_port,
    load_party,
    party_proc,
    start_all,
    wait_healthy,
)
from services.db.session import migrate
from tests.support.databases import postgres_schema_url
from tests.support.federation import TINY_CONFIG, tiny_parties

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
CONFIG = Path(__file__).resolve().parents[2] / "docker" / "haproxy.cfg"
KEY = {"X-API-Key": API_KEY}
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}
REFRESH_S = 1.0  # PARTY_SERVING_REFRESH_S, the default: how often a replica polls for others' writes
FOLLOW_S = 15.0  # deadline for a replica to follow another's write: the refresh plus a rebuild on a busy machine
LOAD_THREADS = 4
FAST_FAULTS = {"COORD_MAX_RETRIES": "1", "COORD_RETRY_BACKOFF_S": "0.05", "COORD_PAUSE_POLL_S": "0.2",
               "COORD_REQUEST_TIMEOUT_S": "20"}


def haproxy_binary() -> str:
    """The haproxy executable (Debian installs it in /usr/sbin); a clear failure when it is missing."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if found is None:
        pytest.fail("haproxy is not installed: `make system-deps` installs it (Debian package haproxy, as root)")
    return found


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (CI fails instead of skipping when the server is down)."""
    yield from postgres_schema_url()


def replica(root: Path, pg_url: str) -> Proc:
    """One `fedrec party serve` process of party "books" on the shared database."""
    env = {"PARTY_DATABASE_URL": pg_url, "PARTY_SERVING_REFRESH_S": str(REFRESH_S), "PARTY_LOG_FORMAT": "text"}
    proc = party_proc("books", root, extra_env=env)
    port = proc.url.rsplit(":", 1)[1]
    return replace(proc, args=[sys.executable, "-m", "cli.main", "party", "serve", "--host", "127.0.0.1",
                               "--port", port])


@dataclass
class HAProxy:
    """HAProxy running docker/haproxy.cfg in the foreground, its log (one line per request) in a file."""

    url: str
    log: Path
    popen: subprocess.Popen[bytes]

    @classmethod
    def start(cls, root: Path, a: Proc, b: Proc) -> HAProxy:
        """Start it in front of replicas a and b; wait until it answers /ready."""
        port = free_port()
        env = {**os.environ, "FEDREC_LB_BIND": f"127.0.0.1:{port}",
               "FEDREC_REPLICA_A": a.url.removeprefix("http://"), "FEDREC_REPLICA_B": b.url.removeprefix("http://")}
        log = root / "haproxy.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen([haproxy_binary(), "-db", "-f", str(CONFIG)], env=env, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        lb = cls(f"http://127.0.0.1:{port}", log, popen)
        try:
            wait_healthy(lb.url, timeout=20, proc=popen, log=log, path="/ready")
        except RuntimeError:
            lb.stop()
            raise
        return lb

    def lines(self) -> list[str]:
        """What HAProxy has logged so far."""
        return self.log.read_text().splitlines()

    def stop(self) -> None:
        """SIGTERM (HAProxy stops at once), SIGKILL if it hangs."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def until(check: Callable[[], bool], *, timeout: float, what: str) -> float:
    """Poll `check` every 50 ms until it holds; the seconds it took. Fails past the deadline."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


@dataclass
class Outcome:
    """One request of the load: when it started and ended, and its status (or the transport error)."""

    started: float
    ended: float
    result: int | str


class Load:
    """Threads that GET recommendations for known users through HAProxy back to back until stopped."""

    def __init__(self, url: str, users: list[str]) -> None:
        self.url, self.users = url, users
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(LOAD_THREADS)]

    def _run(self, k: int) -> None:
        with httpx.Client(base_url=self.url, headers=KEY, timeout=10) as http:
            n = k
            while not self._stop.is_set():
                user = self.users[n % len(self.users)]
                n += LOAD_THREADS
                started = time.monotonic()
                try:
                    result: int | str = http.get(f"/v1/users/{user}/recommendations", params={"k": 5}).status_code
                except httpx.HTTPError as exc:
                    result = type(exc).__name__
                with self._lock:
                    self.outcomes.append(Outcome(started, time.monotonic(), result))

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def done(self, *, after: float = 0.0) -> int:
        """Requests answered 200 that started after `after`."""
        with self._lock:
            return sum(o.result == 200 and o.started > after for o in self.outcomes)


def test_replicas_behind_haproxy_survive_a_sigkill_and_follow_publish_and_erasure(tmp_path: Path,
                                                                                   pg_url: str) -> None:
    haproxy_binary()  # fail before starting anything
    migrate(pg_url)  # once, before the replicas start: two first starts would race on an empty schema
    datasets = tiny_parties(2)
    books, movies = datasets["p0"], datasets["p1"]
    a, b = replica(tmp_path / "a", pg_url), replica(tmp_path / "b", pg_url)
    other = party_proc("movies", tmp_path)
    coord = coordinator_proc(tmp_path, extra_env=FAST_FAULTS)
    procs = [a, b, other, coord]
    lb: HAProxy | None = None
    try:
        start_all(procs)
        lb = HAProxy.start(tmp_path, a, b)
        with httpx.Client(timeout=60) as http:
            def recommend(url: str, user: str) -> httpx.Response:
                return http.get(f"{url}/v1/users/{user}/recommendations", headers=KEY)

            users = sorted(set(books.train.user_ids.tolist()))
            victim, late_victim, known = users[0], users[1], users[2:10]
            for p in (a, b):
                assert recommend(p.url, known[0]).json()["code"] == "model_not_ready"

            # Ingest through HAProxy (spread over both replicas), then a real run whose calls reach `a`.
            load_party(http, lb.url, books)
            load_party(http, other.url, movies)
            client = CoordinatorClient(coord.url)
            client.register("books", lb.url)
            client.register("movies", other.url)
            run_id = client.create_run(rounds=1, min_parties=2, seed=0, config=TINY_CONFIG)["run_id"]
            status = client.wait(run_id, timeout=60)
            assert status["state"] == "completed", status["detail"]

            def serves_run(url: str) -> bool:
                answer = recommend(url, known[0])
                return answer.status_code == 200 and answer.json()["run_id"] == run_id

            assert serves_run(a.url)  # a published it, and rebuilt before answering the coordinator
            publish_s = until(lambda: serves_run(b.url), timeout=FOLLOW_S,
                              what="replica b serving the published model")

            erased = http.delete(f"{lb.url}/v1/users/{victim}", headers=ADMIN_AUTH)
            assert erased.status_code == 200, erased.text
            erase_s = [until(lambda: recommend(p.url, victim).status_code == 404, timeout=FOLLOW_S,  # noqa: B023
                             what=f"{p.url} forgetting the erased user") for p in (a, b)]

            with Load(lb.url, known) as load:
                until(lambda: load.done() >= 20, timeout=30, what="20 requests through HAProxy")
                killed_at = time.monotonic()
                a.kill()
                out = until(lambda: any("party_serving/a is DOWN" in line for line in lb.lines()), timeout=5,
                            what="HAProxy taking the killed replica out of rotation")
                until(lambda: load.done(after=time.monotonic() - 1.0) >= 10 and time.monotonic() > killed_at + 2,
                      timeout=20, what="requests succeeding after the kill")
            failed = [o for o in load.outcomes if o.result != 200]
            in_flight = sum(o.started < killed_at < o.ended for o in load.outcomes)
            redispatched = [line for line in lb.lines() if "/recommendations" in line and "retries=+" in line]
            # Every GET that met the dead replica (in flight on it, or sent before its check failed) is
            # replayed on b (retry-on empty-response/conn-failure, redispatch 1): none may fail.
            assert not failed, (f"{len(failed)} of {len(load.outcomes)} requests failed ({in_flight} in flight "
                                f"at the kill): {failed[:5]}")
            after = load.done(after=killed_at)
            served = {m.group(1) for line in lb.lines() if (m := re.search(r"party_serving/(\w+) ", line))}
            assert served == {"a", "b"}  # both replicas were in rotation before the kill
            print(f"haproxy: b followed the publish in {publish_s:.2f} s, the erasure in {erase_s[1]:.2f} s "
                  f"(a: {erase_s[0]:.2f} s); {len(load.outcomes)} requests, 0 failed, {in_flight} in flight at the kill, "
                  f"{len(redispatched)} redispatched, a out of rotation {out:.2f} s after the kill, "
                  f"{after} answered after it")

            # With a down, the erasure goes to b (party_primary's backup) and b forgets the user at once.
            erased = http.delete(f"{lb.url}/v1/users/{late_victim}", headers=ADMIN_AUTH)
            assert erased.status_code == 200, erased.text
            assert recommend(b.url, late_victim).status_code == 404
            assert recommend(lb.url, known[0]).status_code == 200
    finally:
        if lb is not None:
            lb.stop()
        for p in procs:
            p.stop()
