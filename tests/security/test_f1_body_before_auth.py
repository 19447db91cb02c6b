"""F1: a body is never read before its credential is checked, and every route has a body limit.

Reproduces the finding: a 200 MB JSON body without a credential pushed a party from 0.38 GB to
2.03 GB RSS before it answered 401. Measured on a real `python -m party_api` process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.localfed import ADMIN, COORD_TOKEN, Proc, coordinator_proc, party_proc
from tests.support.hostile import peak_rss_bytes, send_unread_body

SIZE = 200 * 1024 * 1024
MAX_RSS_RISE = 50 * 1024 * 1024


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("hostile", tmp_path_factory.mktemp("f1")).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("path", ["/v1/interactions", "/v1/items", "/v1/evaluation-split", "/v1/predictions",
                                  "/v1/federation/runs/r1/configure", "/v1/social/sessions"])
def test_200mb_body_without_credential_is_refused_unread(party: Proc, path: str) -> None:
    assert party.popen is not None
    before = peak_rss_bytes(party.popen.pid)
    method = "PUT" if path == "/v1/evaluation-split" else "POST"
    answer = send_unread_body(party.url, path, size=SIZE, method=method)
    assert answer.status == 401, answer.body
    assert answer.body["code"] == "unauthorized"
    assert answer.bytes_sent < SIZE  # the connection was closed: the body was not taken in
    assert peak_rss_bytes(party.popen.pid) - before < MAX_RSS_RISE
    assert httpx.get(f"{party.url}/health", timeout=2).status_code == 200


def test_wrong_credential_is_refused_unread(party: Proc) -> None:
    answer = send_unread_body(party.url, "/v1/interactions", size=SIZE, headers={"Authorization": "Bearer nope"})
    assert answer.status == 403 and answer.bytes_sent < SIZE


def test_valid_credential_on_a_small_route_gets_413_unread(party: Proc) -> None:
    assert party.popen is not None
    before = peak_rss_bytes(party.popen.pid)
    answer = send_unread_body(party.url, "/v1/federation/runs/r1/publish", size=SIZE,
                              headers={"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": "1"})
    assert answer.status == 413 and answer.body["code"] == "payload_too_large"
    assert answer.bytes_sent < SIZE
    assert peak_rss_bytes(party.popen.pid) - before < MAX_RSS_RISE


def test_streamed_body_past_the_limit_gets_413(party: Proc) -> None:
    """Without a Content-Length the guard counts the bytes as the app reads them."""
    def chunks() -> Iterator[bytes]:
        yield b'{"rows": ['
        for _ in range(40):  # 40 x 1 MiB > the 32 MiB JSON limit
            yield b" " * (1 << 20)
        yield b"]}"

    r = httpx.post(f"{party.url}/v1/interactions", content=chunks(),
                   headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"


def test_coordinator_refuses_unread_bodies_too(tmp_path: Path) -> None:
    coord = coordinator_proc(tmp_path).start()
    try:
        assert coord.popen is not None
        before = peak_rss_bytes(coord.popen.pid)
        for path in ("/v1/parties", "/v1/runs"):
            answer = send_unread_body(coord.url, path, size=SIZE)
            assert answer.status == 401 and answer.bytes_sent < SIZE
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert send_unread_body(coord.url, "/v1/runs", size=SIZE, headers=admin).status == 413
        assert peak_rss_bytes(coord.popen.pid) - before < MAX_RSS_RISE
    finally:
        coord.stop()
