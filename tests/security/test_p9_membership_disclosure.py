"""P9: predictions and recommendations tell an app which organizations know a person. The choice made is to
document it (docs/privacy.md §6.1), not to answer uniformly; this test holds the documentation to what a real
coordinator process answers (two live parties, one of which knows the user)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from cli.localfed import ADMIN, API_KEY, Proc, coordinator_proc
from tests.support.servers import LiveServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
TOKEN = "party-token-Zq3x9LmP0aB7cD2eF5gH8jK1"


def _party(knows: bool) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/users/{user_id}/recommendations")
    async def recommend(user_id: str) -> JSONResponse:
        if not knows:
            return JSONResponse({"code": "not_found", "detail": "unknown", "field": "user_id"}, 404)
        return JSONResponse({"user_id": user_id, "items": [{"item_id": "i1", "score": 4.0}], "fallback": None})

    @app.post("/v1/predictions")
    async def predict(request: Request) -> JSONResponse:
        pairs = (await request.json())["pairs"]
        if not knows:
            return JSONResponse({"predictions": [], "skipped": [{"row": r, "field": "user_id"}
                                                                 for r in range(len(pairs))]})
        return JSONResponse({"predictions": [{"rating": 4.0, "fallback": None} for _ in pairs], "skipped": []})

    return app


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    servers = {"knows": LiveServer(_party(True)).start(), "stranger": LiveServer(_party(False)).start()}
    coord = coordinator_proc(tmp_path_factory.mktemp("p9"), extra_env={"COORD_FANOUT_TIMEOUT_S": "30"}).start()
    try:
        for pid, live in servers.items():
            httpx.post(f"{coord.url}/v1/parties", headers={"Authorization": f"Bearer {ADMIN}"},
                       json={"party_id": pid, "url": live.url, "token": TOKEN}).raise_for_status()
        yield coord
    finally:
        coord.stop()
        for live in servers.values():
            live.stop()


def test_the_answers_disclose_membership_as_documented(coordinator: Proc) -> None:
    key = {"X-API-Key": API_KEY}
    merged = httpx.get(f"{coordinator.url}/v1/users/u1/recommendations", headers=key, timeout=30).json()
    assert {it["party_id"] for it in merged["items"]} == {"knows"}  # who knows the user, per item
    pairs = [{"user_id": "u1", "item_id": "i1", "party_id": p} for p in ("knows", "stranger")]
    out = httpx.post(f"{coordinator.url}/v1/predictions", json={"pairs": pairs}, headers=key, timeout=30).json()
    by_party = {p["party_id"]: p for p in out["predictions"]}
    assert by_party["knows"]["status"] == "ok"
    assert by_party["stranger"]["status"] == "unknown" and by_party["stranger"]["reason"] == "unknown_user"


def test_the_privacy_doc_states_it() -> None:
    text = DOC.read_text()
    section = re.search(r"### 6\.1 Serving tells an app which organizations know a person.*?(?=\n## )", text, re.S)
    assert section is not None, "docs/privacy.md §6.1 is missing"
    for named in ("party_id", "`status`", "`unknown`", "unknown_user", "COORD_API_KEYS", "documented, not hidden"):
        assert named in section.group(0), named
