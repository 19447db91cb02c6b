"""A party that answers too slowly is left out of that round (timeout is data) and takes part again next round."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.support.federation import TINY_CONFIG, federation


class SlowOnce:
    """ASGI wrapper that delays the first request to one path (a stalled party)."""

    def __init__(self, app: Any, suffix: str, delay: float) -> None:
        self.app, self.suffix, self.delay, self.fired = app, suffix, delay, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith(self.suffix) and not self.fired:
            self.fired = True
            await asyncio.sleep(self.delay)
        await self.app(scope, receive, send)


def test_slow_party_is_left_out_of_one_round(tmp_path: Path) -> None:
    def wrap(pid: str, app: Any) -> Any:
        return SlowOnce(app, "/rounds/2/steps/projection", delay=4.0) if pid == "p2" else app

    with federation(tmp_path, wrap=wrap, request_timeout_s=2.0, max_retries=0) as fed:
        run_id = fed.client.create_run(rounds=5, min_parties=2, seed=3, config=TINY_CONFIG)["run_id"]
        status = fed.client.wait(run_id, timeout=120)
    assert status["state"] == "completed", status["detail"]
    by_round = {r["round_index"]: r for r in status["rounds"]}
    assert by_round[2]["participants"] == ["p0", "p1"]
    assert "projection[0]" in by_round[2]["failures"]["p2"] and "unavailable" in by_round[2]["failures"]["p2"]
    assert all(by_round[t]["participants"] == ["p0", "p1", "p2"] for t in (0, 1, 3, 4))
    assert by_round[3]["failures"] == {} and "test_rmse" in by_round[2]["metrics"]
