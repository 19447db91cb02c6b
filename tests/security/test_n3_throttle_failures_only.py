"""N3: 120 wrong bearer tokens from a shared address locked valid callers out (429); /metrics was not
throttled; X-Forwarded-For from loopback was believed, so rotating it evaded the throttle.

Now only failures count and only failures wait, /metrics failures count like any other, and forwarded
headers are believed from `*_TRUSTED_PROXIES` only (none by default). Run on a real `python -m party_api`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import ADMIN, Proc, party_proc

METRICS = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = party_proc("n3", tmp_path_factory.mktemp("n3"), extra_env={"PARTY_METRICS_TOKEN": METRICS}).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_wrong_tokens_do_not_lock_out_valid_callers(party: Proc) -> None:
    with httpx.Client(base_url=party.url, timeout=10) as c:
        # /metrics failures count, and a new X-Forwarded-For on each try is not believed.
        statuses = [c.get("/metrics", headers={"Authorization": f"Bearer wrong-{k}",
                                               "X-Forwarded-For": f"10.0.{k // 250}.{k % 250}"}).status_code
                    for k in range(120)]
        assert statuses[:100] == [403] * 100 and set(statuses[100:]) == {429}
        # The probe's sequence: wrong tokens to /v1/summary, then the right one.
        for k in range(20):
            assert c.get("/v1/summary", headers={"Authorization": f"Bearer wrong-{k}"}).status_code == 429
        right = c.get("/v1/summary", headers={"Authorization": f"Bearer {ADMIN}"})
        assert right.status_code == 200, right.text
        assert c.get("/metrics", headers={"Authorization": f"Bearer {METRICS}"}).status_code == 200
        wrong = c.get("/v1/summary", headers={"Authorization": "Bearer still-wrong"})
        assert wrong.status_code == 429 and int(wrong.headers["Retry-After"]) >= 1
