"""Releases over live HTTP: run → active release; a worse run held by the gate; force; rollback; pinned fan-out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cli.localfed import ADMIN, API_KEY, COORD_TOKEN, party_proc
from cli.main import app
from services.protocol import PROTOCOL_VERSION
from tests.support.federation import TINY_CONFIG, Federation, federation

KEY = {"X-API-Key": API_KEY}
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
AS_COORDINATOR = {"Authorization": f"Bearer {COORD_TOKEN}", "X-Fedrec-Protocol": PROTOCOL_VERSION}


FAIL_PUBLISH: set[str] = set()  # parties whose publish call answers 503 (as a party going down then would)


class PublishFault:
    """ASGI wrapper: a party in FAIL_PUBLISH answers its publish step with 503."""

    def __init__(self, party_id: str, app: Any) -> None:
        self.party_id, self.app = party_id, app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.party_id in FAIL_PUBLISH and scope["path"].endswith("/publish"):
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"down"})
            return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """Three live parties and a coordinator (parties re-read the database every 0.2 s)."""
    with federation(tmp_path_factory.mktemp("rel"), party={"serving_refresh_s": 0.2}, wrap=PublishFault) as f:
        yield f


def _run(fed: Federation, rounds: int, seed: int) -> dict[str, Any]:
    run = fed.client.create_run(rounds=rounds, min_parties=2, seed=seed, config=TINY_CONFIG)
    status = fed.client.wait(run["run_id"], timeout=300)
    assert status["state"] == "completed", status["detail"]
    return status


def _releases(fed: Federation) -> dict[str, dict[str, Any]]:
    resp = fed.http.get(f"{fed.coordinator.url}/v1/releases", headers=ADMIN_H)
    assert resp.status_code == 200, resp.text
    return {r["release_id"]: r for r in resp.json()}


def _activate(fed: Federation, release_id: str, **body: Any) -> Any:
    return fed.http.post(f"{fed.coordinator.url}/v1/releases/{release_id}/activate", headers=ADMIN_H, json=body)


def _user(fed: Federation) -> str:
    return str(fed.datasets["p0"].train.user_ids[0])


def _answers(fed: Federation) -> dict[str, dict[str, Any]]:
    """Each party's own top-5 for one user, and the coordinator's merged top-8."""
    out = {pid: fed.http.get(f"{live.url}/v1/users/{_user(fed)}/recommendations", params={"k": 5},
                             headers=KEY).json() for pid, live in fed.parties.items()}
    out["coordinator"] = fed.http.get(f"{fed.coordinator.url}/v1/users/{_user(fed)}/recommendations",
                                      params={"k": 8}, headers=KEY).json()
    return out


def test_release_life(fed: Federation) -> None:
    status = _run(fed, rounds=6, seed=5)
    first = _releases(fed)["release-1"]
    assert first["state"] == "active" and first["run_id"] == status["run_id"], first
    assert sorted(first["staged"]) == sorted(fed.parties) and first["valid_rmse"] is not None
    assert "release-1 active" in status["detail"]
    before = _answers(fed)
    assert {a["release_id"] for a in before.values()} == {"release-1"}, before
    assert before["coordinator"]["unavailable"] == {} and before["coordinator"]["items"]

    # A deliberately worse run (one round) stays staged with both figures in the reason.
    worse = _run(fed, rounds=1, seed=5)
    second = _releases(fed)["release-2"]
    assert second["state"] == "staged", second
    assert "promotion gate" in second["reason"] and f"{first['valid_rmse']:.4f}" in second["reason"]
    assert f"{second['valid_rmse']:.4f}" in second["reason"] and "release-2 staged" in worse["detail"]
    assert first["valid_ndcg"] is not None and second["valid_ndcg"] is not None  # the gate's second figure
    assert f"{first['valid_ndcg']:.4f}" in second["reason"] and f"{second['valid_ndcg']:.4f}" in second["reason"]
    assert {a["release_id"] for a in _answers(fed).values()} == {"release-1"}
    refused = _activate(fed, "release-2")
    assert refused.status_code == 409 and "promotion gate" in refused.json()["detail"], refused.text

    # Forced past the gate: every party serves release 2, release 1 is retired.
    forced = _activate(fed, "release-2", force=True)
    assert forced.status_code == 200 and forced.json()["state"] == "active", forced.text
    assert _releases(fed)["release-1"]["state"] == "retired"
    assert {a["release_id"] for a in _answers(fed).values()} == {"release-2"}

    # Rollback: a retired release needs no force; the answers are release 1's earlier ones.
    back = _activate(fed, "release-1")
    assert back.status_code == 200 and back.json()["state"] == "active", back.text
    assert _releases(fed)["release-2"]["state"] == "retired"
    assert _answers(fed) == before


def test_fan_out_never_merges_another_release(fed: Federation) -> None:
    """A party switched behind the coordinator's back is reported, not merged; asking it directly names it."""
    active = next(r for r, row in _releases(fed).items() if row["state"] == "active")
    other = next(r for r in _releases(fed) if r != active)
    p0 = fed.parties["p0"].url
    resp = fed.http.post(f"{p0}/v1/federation/releases/{other}/activate",
                         headers=AS_COORDINATOR)
    assert resp.status_code == 200, resp.text
    try:
        merged = fed.http.get(f"{fed.coordinator.url}/v1/users/{_user(fed)}/recommendations",
                              params={"k": 8}, headers=KEY).json()
        assert merged["unavailable"] == {"p0": "release_mismatch"} and merged["partial"] is True, merged
        assert merged["release_id"] == active and {it["party_id"] for it in merged["items"]} <= {"p1", "p2"}
        direct = fed.http.get(f"{p0}/v1/users/{_user(fed)}/recommendations", params={"release": active},
                              headers=KEY)
        assert direct.status_code == 409 and direct.json()["code"] == "release_mismatch", direct.text
        missing = fed.http.post(f"{p0}/v1/federation/releases/nope/activate",
                                headers=AS_COORDINATOR)
        assert missing.status_code == 404 and "nope" in missing.json()["detail"]
    finally:
        # Activating the active release again tells every party again: p0 follows.
        assert _activate(fed, active).status_code == 200
    merged = fed.http.get(f"{fed.coordinator.url}/v1/users/{_user(fed)}/recommendations",
                          params={"k": 8}, headers=KEY).json()
    assert merged["unavailable"] == {} and merged["release_id"] == active, merged


def test_release_api_errors(fed: Federation) -> None:
    assert fed.http.get(f"{fed.coordinator.url}/v1/releases").status_code == 401
    missing = fed.http.get(f"{fed.coordinator.url}/v1/releases/release-99", headers=ADMIN_H)
    assert missing.status_code == 404 and "release-99" in missing.json()["detail"]
    bad = _activate(fed, "release-1", force="maybe")
    assert bad.status_code == 422 and "force" in bad.text


def test_activation_reaches_every_worker_process(fed: Federation) -> None:
    """A second p0 service (two worker processes) over p0's database switches release within seconds."""
    proc = party_proc("p0", fed.root, extra_env={"PARTY_WORKERS": "2", "PARTY_SERVING_REFRESH_S": "0.2"}).start()
    try:
        def served() -> set[str]:
            # Fresh connections, so the kernel spreads them over both workers.
            return {httpx.get(f"{proc.url}/v1/users/{_user(fed)}/recommendations", headers=KEY,
                              timeout=10).json()["release_id"] for _ in range(24)}

        active = next(r for r, row in _releases(fed).items() if row["state"] == "active")
        other = next(r for r, row in _releases(fed).items() if row["state"] == "retired")
        assert served() == {active}
        assert _activate(fed, other).status_code == 200
        deadline = time.monotonic() + 5.0
        while (seen := served()) != {other}:
            assert time.monotonic() < deadline, f"workers still serve {seen} 5 s after activating {other}"
            time.sleep(0.1)
    finally:
        proc.stop()


def test_release_cli(fed: Federation) -> None:
    def cli(*args: str, token: str = ADMIN) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["release", *args, "--url", fed.coordinator.url, "--token", token])
        return result.exit_code, result.output

    listed = _releases(fed)
    active = next(r for r, row in listed.items() if row["state"] == "active")
    code, output = cli("list")
    assert code == 0 and all(r in output for r in listed) and "active" in output and "retired" in output, output
    code, output = cli("show", active, "--json")
    assert code == 0 and json.loads(output)["release_id"] == active
    code, output = cli("show", active)
    assert code == 0 and f"release {active}: active" in output and "value report" in output, output
    code, output = cli("activate", active)
    assert code == 0 and f"release {active}: active" in output, output
    code, output = cli("activate", "release-99")
    assert code == 1 and len(output.strip().splitlines()) == 1 and "release-99" in output, output
    code, output = cli("list", token="wrong-token-value")
    assert code == 1 and "Traceback" not in output and "wrong-token-value" not in output, output


def test_a_party_failing_publish_leaves_the_release_staged(fed: Federation) -> None:
    before = _answers(fed)
    active = before["coordinator"]["release_id"]
    FAIL_PUBLISH.add("p2")
    try:
        status = _run(fed, rounds=6, seed=5)
    finally:
        FAIL_PUBLISH.clear()
    new = next(r for r in _releases(fed).values() if r["run_id"] == status["run_id"])
    assert new["state"] == "staged" and sorted(new["staged"]) == ["p0", "p1"], new
    assert "not staged at p2" in new["reason"] and "not staged at p2" in status["detail"]
    assert _answers(fed) == before and {a["release_id"] for a in before.values()} == {active}
    refused = _activate(fed, new["release_id"], force=True)
    assert refused.status_code == 409 and "not staged at p2" in refused.json()["detail"], refused.text
