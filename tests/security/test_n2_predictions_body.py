"""N2: a client API key could post 32 MiB of JSON to POST /v1/predictions, parsed on the event loop
before any refusal (+857 MB peak, /health stalled 1.34 s). The route now has its own body class sized to
its schema (10,000 pairs ~ 1 MiB): the probe's body is answered 413 unread, a full batch still passes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import API_KEY, Proc, coordinator_proc, party_proc
from tests.support.hostile import peak_rss_bytes, send_unread_body

SIZE = 32 << 20
KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("n2", tmp_path_factory.mktemp("n2")).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_32_mib_of_json_with_an_api_key_is_refused_unread(party: Proc) -> None:
    assert party.popen is not None
    before = peak_rss_bytes(party.popen.pid)
    stalls: list[float] = []
    done = threading.Event()

    def poll_health() -> None:
        with httpx.Client(base_url=party.url, timeout=10) as c:
            while not done.is_set():
                started = time.perf_counter()
                c.get("/health")
                stalls.append(time.perf_counter() - started)
                time.sleep(0.01)

    poller = threading.Thread(target=poll_health)
    poller.start()
    deadline = time.monotonic() + 10
    while not stalls and time.monotonic() < deadline:  # polling before the body goes out
        time.sleep(0.01)
    try:  # the probe's body: one pair, then {"x": [{}, {}, ...]} to 32 MiB
        answer = send_unread_body(party.url, "/v1/predictions", size=SIZE, headers=KEY)
        time.sleep(0.2)  # and a little after the answer
    finally:
        done.set()
        poller.join(10)
    assert answer.status == 413 and answer.body["code"] == "payload_too_large", answer.body
    assert answer.bytes_sent < SIZE
    assert peak_rss_bytes(party.popen.pid) - before < 20 << 20
    assert stalls and max(stalls) < 0.5


def test_a_full_batch_of_10000_pairs_fits(party: Proc) -> None:
    pairs = [{"user_id": f"user-{k:06d}", "item_id": f"item-{k:06d}"} for k in range(10_000)]
    r = httpx.post(f"{party.url}/v1/predictions", json={"pairs": pairs}, headers=KEY, timeout=30)
    assert r.status_code != 413, r.text
    assert r.status_code in (200, 409)  # no model published yet: 409, after the body was parsed
    over = httpx.post(f"{party.url}/v1/predictions", json={"pairs": pairs * 3}, headers=KEY, timeout=30)
    assert over.status_code == 413  # 30,000 pairs (1.5 MB): refused by size before parsing


def test_the_coordinators_predictions_route_is_bounded_too(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The coordinator's POST /v1/predictions (routed to the parties) opens with the same client key."""
    coord = coordinator_proc(tmp_path_factory.mktemp("n2c")).start()
    try:
        assert coord.popen is not None
        before = peak_rss_bytes(coord.popen.pid)
        answer = send_unread_body(coord.url, "/v1/predictions", size=SIZE, headers=KEY)
        assert answer.status == 413 and answer.bytes_sent < SIZE, answer.body
        assert peak_rss_bytes(coord.popen.pid) - before < 20 << 20
    finally:
        coord.stop()
