"""F11: failed authentication is throttled per client address (429 with Retry-After)."""

from __future__ import annotations

import httpx

from api_common.guard import AuthThrottle
from tests.support.party import ADMIN, Party


def test_1000_wrong_tokens_turn_into_429(party: Party) -> None:
    """The tester's 1,000 wrong tokens were all answered 403 in under 5 s; now the address waits."""
    statuses = []
    with httpx.Client(base_url=party.url, timeout=10) as c:
        for k in range(1000):
            r = c.get("/v1/summary", headers={"Authorization": f"Bearer wrong-{k}"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                break
        assert statuses.count(403) == party.settings.auth_failure_limit
        assert statuses[-1] == 429 and int(r.headers["Retry-After"]) >= 1
        assert r.json()["code"] == "too_many_requests"
        # The right token from the same address passes (N3: wrong tokens must not lock out valid callers).
        assert c.get("/v1/summary", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200
        assert c.get("/health").status_code == 200  # routes without a credential stay open


def test_throttle_window_slides() -> None:
    now = [0.0]
    throttle = AuthThrottle(limit=3, window_s=10.0, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
    assert throttle.retry_after("a") == 11 and throttle.retry_after("b") is None
    now[0] = 10.5
    assert throttle.retry_after("a") is None


def test_each_worker_process_allows_its_share_of_the_limit() -> None:
    """The throttle counts per process: N workers each allow limit ÷ N, so together about the limit, not N×."""
    from fastapi import FastAPI

    from api_common.guard import RequestGuard, install_guard, per_process_limit
    from services.config import PartySettings

    assert [per_process_limit(100, workers=w) for w in (1, 2, 3, 4, 64)] == [100, 50, 34, 25, 2]
    assert per_process_limit(1, workers=8) == 1
    app = FastAPI()
    settings = PartySettings(database_url="sqlite://", workers=4, auth_failure_limit=10, dev_mode=True)
    install_guard(app, settings=settings, checks={})
    guard = app.router.middleware_stack  # the guard is the router's dispatcher
    assert isinstance(guard, RequestGuard) and guard.throttle.limit == 3
