"""N9: connections with unfinished headers stayed open without any credential (slowloris): the probe's
`GET /health HTTP/1.1\\r\\nHost: x\\r\\n` and nothing more, or a header byte every 5 s, were still open
after 60 s. Now headers must be complete within PARTY_HEADER_TIMEOUT_S of the first byte (408, closed),
fit PARTY_MAX_HEADER_BYTES (431), and a body that stops arriving is answered 408 after PARTY_BODY_TIMEOUT_S.
Run on a real `python -m party_api` process with a 2 s header deadline."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import ADMIN, Proc, party_proc

HEADER_S, BODY_S = 2.0, 2.0


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {"PARTY_HEADER_TIMEOUT_S": str(HEADER_S), "PARTY_BODY_TIMEOUT_S": str(BODY_S),
           "PARTY_MAX_HEADER_BYTES": "8192"}
    proc = party_proc("n9", tmp_path_factory.mktemp("n9"), extra_env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


def _connect(party: Proc) -> socket.socket:
    host, port = party.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.settimeout(HEADER_S + 8)
    return sock


def _answer_and_close(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (s from now)."""
    started, data = time.monotonic(), b""
    while True:
        part = sock.recv(65536)
        if not part:
            return data, time.monotonic() - started
        data += part


def test_unfinished_headers_are_closed_within_the_deadline(party: Proc) -> None:
    with _connect(party) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the probe's request: no blank line, ever
        data, _ = _answer_and_close(sock)
        assert time.monotonic() - started < HEADER_S + 2
    assert data.startswith(b"HTTP/1.1 408"), data


def test_a_header_drip_is_closed_within_the_deadline(party: Proc) -> None:
    with _connect(party) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        closed = False
        for _ in range(20):  # a byte every 0.5 s would keep it open for 10 s and more
            try:
                sock.sendall(b"X")
            except OSError:
                closed = True
                break
            time.sleep(0.5)
            sock.setblocking(False)
            try:
                closed = sock.recv(65536) is not None
            except BlockingIOError:
                pass
            sock.setblocking(True)
            if closed:
                break
        assert closed and time.monotonic() - started < HEADER_S + 2


def test_a_silent_connection_is_closed_too(party: Proc) -> None:
    with _connect(party) as sock:
        data, seconds = _answer_and_close(sock)
    assert data.startswith(b"HTTP/1.1 408") and seconds < HEADER_S + 2


def test_oversized_headers_get_431(party: Proc) -> None:
    with _connect(party) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 16384)
        data, seconds = _answer_and_close(sock)
    assert data.startswith(b"HTTP/1.1 431") and seconds < 2


def test_a_stalled_body_is_answered_408(party: Proc) -> None:
    with _connect(party) as sock:
        started = time.monotonic()
        sock.sendall(f"POST /v1/interactions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"rows\": [".encode())
        data, _ = _answer_and_close(sock)
        assert time.monotonic() - started < BODY_S + 3
    assert data.startswith(b"HTTP/1.1 408") and b"request_timeout" in data, data


def test_normal_and_kept_alive_requests_still_work(party: Proc) -> None:
    with httpx.Client(base_url=party.url, timeout=10) as c:
        assert c.get("/health").status_code == 200
        time.sleep(HEADER_S + 0.5)  # idle between requests is the keep-alive timeout's business
        assert c.get("/health").status_code == 200
        rows = {"rows": [{"user_id": "u1", "item_id": "i1", "rating": 4}]}
        assert c.post("/v1/interactions", json=rows, headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200


def test_a_kept_alive_connection_gives_each_request_its_own_header_deadline(party: Proc) -> None:
    """The deadline runs from each request's first byte: a second request begun 1 s after the first is
    closed HEADER_S after its own start (not the first request's), and not left open either."""
    with _connect(party) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(1.0)
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
        data, _ = _answer_and_close(sock)
        waited = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 408"), data
    assert HEADER_S - 0.3 < waited < HEADER_S + 2, waited
