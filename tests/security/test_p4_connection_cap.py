"""P4: one caller could hold every connection slot: 2,100 silent connections without a credential made the
coordinator's own pre-flight get 503, and 2,047 slow bodies with a client key held the rest. Now one client
address holds at most PARTY_MAX_CONNECTIONS_PER_ADDRESS connections (a further one is answered 503 and
closed before anything is read), and a body slower than PARTY_MIN_BODY_RATE_BYTES_S (after a grace of
PARTY_BODY_TIMEOUT_S) is answered 408. Real `python -m party_api` process; the hostile caller connects
from 127.0.0.2, the legitimate one from 127.0.0.1 (both loopback)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import ADMIN, Proc, party_proc

PER_ADDRESS, TOTAL, BODY_S, RATE = 8, 24, 2.0, 2000


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {"PARTY_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS), "PARTY_MAX_CONNECTIONS": str(TOTAL),
           "PARTY_BODY_TIMEOUT_S": str(BODY_S), "PARTY_MIN_BODY_RATE_BYTES_S": str(RATE),
           "PARTY_HEADER_TIMEOUT_S": "30"}
    proc = party_proc("p4", tmp_path_factory.mktemp("p4"), extra_env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


def _address(party: Proc) -> tuple[str, int]:
    host, port = party.url.removeprefix("http://").split(":")
    return host, int(port)


def _connect_from(source: str, party: Proc) -> socket.socket:
    sock = socket.create_connection(_address(party), timeout=5, source_address=(source, 0))
    sock.settimeout(5)
    return sock


def _closed_with(sock: socket.socket) -> bytes | None:
    """What the server sent before closing, or None while it keeps the connection open."""
    sock.settimeout(0.5)
    data = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                return data
            data += part
    except (TimeoutError, socket.timeout):
        return None
    except ConnectionResetError:
        return data


def test_one_address_cannot_take_every_slot(party: Proc) -> None:
    silent = [_connect_from("127.0.0.2", party) for _ in range(TOTAL + 10)]  # more than the whole process holds
    try:
        time.sleep(0.5)
        refused = [_closed_with(s) for s in silent[PER_ADDRESS:]]
        assert all(r is not None and r.startswith(b"HTTP/1.1 503") for r in refused), refused[:3]
        assert all(_closed_with(s) is None for s in silent[:PER_ADDRESS])  # its share stays open
        with httpx.Client(base_url=party.url, timeout=10) as c:  # another address still gets in
            for _ in range(5):
                assert c.get("/health").status_code == 200
    finally:
        for s in silent:
            s.close()
    time.sleep(0.5)
    again = _connect_from("127.0.0.2", party)  # the slots were given back when those closed
    try:
        again.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (_closed_with(again) or b"").startswith(b"HTTP/1.1 200")
    finally:
        again.close()


def test_a_body_slower_than_the_minimum_rate_is_answered_408(party: Proc) -> None:
    sock = _connect_from("127.0.0.3", party)
    try:
        started = time.monotonic()
        sock.sendall(f"POST /v1/interactions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"rows\": [".encode())
        answer = None
        while answer is None and time.monotonic() - started < 30:
            try:
                sock.sendall(b" " * 200)  # 200 bytes every 0.5 s: never a gap of BODY_S, but 400 B/s < RATE
            except OSError:
                answer = b""
                break
            time.sleep(0.5)
            answer = _closed_with(sock)
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert answer is not None and elapsed < BODY_S + 8, elapsed
    assert answer == b"" or (answer.startswith(b"HTTP/1.1 408") and b"bytes/s" in answer), answer


def test_a_body_at_a_normal_rate_passes(party: Proc) -> None:
    rows = {"rows": [{"user_id": f"u{k}", "item_id": f"i{k}", "rating": 4} for k in range(2000)]}
    with httpx.Client(base_url=party.url, timeout=30) as c:
        r = c.post("/v1/interactions", json=rows, headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200, r.text
