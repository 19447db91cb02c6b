"""The coordinator's retries of a party: jittered backoff, and the Retry-After a party's forwarder sends honoured."""

from __future__ import annotations

import socket
import threading
import time
from email.utils import formatdate
from pathlib import Path

import httpx
import pytest

from party_api.main import create_app
from services.coordinator.client import PartyClient, TrafficCounter
from services.coordinator.registry import PartyEndpoint
from services.coordinator.retries import RETRY_AFTER_CAP_S, TransientAnswer, retry_after_s, with_retries
from services.db.session import migrate
from services.errors import PartyUnavailable
from tests.support.party import COORDINATOR, party_settings
from tests.support.servers import LiveServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite party database."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    return url


def _client(url: str, *, max_retries: int, backoff_s: float = 0.05) -> PartyClient:
    return PartyClient(PartyEndpoint("p1", url, COORDINATOR, "ratings", True), http=httpx.Client(),
                       counter=TrafficCounter(), max_retries=max_retries, backoff_s=backoff_s)


def test_the_forwarders_retry_after_is_waited_for_then_the_party_is_unavailable(db: str) -> None:
    """An api process whose federation process is down answers 503 + Retry-After: 1; each retry waits that."""
    api = LiveServer(create_app(party_settings(db, process_role="api",
                                               federation_url=f"http://127.0.0.1:{_free_port()}"))).start()
    client = _client(api.url, max_retries=2)
    try:
        started = time.monotonic()
        with pytest.raises(PartyUnavailable) as caught:
            client.psi_start(run_id="run-1")
        elapsed = time.monotonic() - started
    finally:
        client.http.close()
        api.stop()
    assert "503" in caught.value.detail and caught.value.extra["party_id"] == "p1"
    assert 2.0 <= elapsed < 2 * (1.0 + 0.05) + 5.0  # two waits of Retry-After (1 s) plus at most 0.05 s jitter each


def test_a_retry_reaches_the_federation_process_once_it_is_back(db: str) -> None:
    """The federation process comes up during the Retry-After wait: the retried call is answered."""
    fed = LiveServer(create_app(party_settings(db, process_role="federation")))  # bound, not listening yet
    api = LiveServer(create_app(party_settings(db, process_role="api", federation_url=fed.url))).start()
    timer = threading.Timer(0.3, fed.start)
    client = _client(api.url, max_retries=3)
    try:
        started = time.monotonic()
        timer.start()
        answer = client.psi_start(run_id="run-1")
        elapsed = time.monotonic() - started
    finally:
        timer.join()
        client.http.close()
        api.stop()
        fed.stop()
    assert answer == b"" and elapsed >= 1.0  # the answer (no users loaded: no points), after a Retry-After wait


def test_retry_after_reads_seconds_and_dates_and_ignores_the_unreadable() -> None:
    def answer(value: str | None) -> httpx.Response:
        return httpx.Response(503, headers={} if value is None else {"Retry-After": value})

    assert retry_after_s(answer("3")) == 3.0 and retry_after_s(answer("0")) == 0.0
    assert retry_after_s(answer(None)) is None and retry_after_s(answer("soon")) is None
    now = time.time()
    assert retry_after_s(answer(formatdate(now + 20, usegmt=True)), now=now) == pytest.approx(20.0, abs=1.0)
    assert retry_after_s(answer(formatdate(now - 20, usegmt=True)), now=now) == 0.0


def test_waits_are_jittered_capped_and_follow_retry_after() -> None:
    def run(status: int, headers: dict[str, str], *, retries: int, backoff_s: float) -> list[float]:
        waits: list[float] = []

        def attempt() -> None:
            raise TransientAnswer(httpx.Response(status, headers=headers))

        with pytest.raises(TransientAnswer):
            with_retries(attempt, max_retries=retries, backoff_s=backoff_s, sleep=waits.append)
        return waits

    plain = run(500, {}, retries=6, backoff_s=0.1)
    assert len(plain) == 6 and all(0.0 <= w <= 0.1 * 2 ** n for n, w in enumerate(plain))
    assert len({round(w, 9) for w in plain}) > 1  # full jitter: not the same fixed ladder every time
    asked = run(503, {"Retry-After": "2"}, retries=3, backoff_s=0.1)
    assert len(asked) == 3 and all(2.0 <= w <= 2.1 for w in asked)
    capped = run(503, {"Retry-After": "86400"}, retries=1, backoff_s=0.1)
    assert RETRY_AFTER_CAP_S <= capped[0] <= RETRY_AFTER_CAP_S + 0.1
