"""`fedrec demo --tls`: the demo's coordinator and three party processes on HTTPS with the CA the demo
makes, parties requiring client certificates; the whole demo path runs (small data, two rounds)."""

from __future__ import annotations

import io
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

import cli.demo as demo_mod
from cli.localfed import ADMIN, Proc
from services.data.synthetic import generate
from services.data.types import Dataset


@pytest.mark.slow
def test_demo_runs_over_mutual_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    def small(data: Path | None, seed: int) -> Dataset:
        return generate(120, 150, 3000, seed=seed, name="synthetic-demo-small")

    started: list[Proc] = []
    probed: dict[str, Any] = {}
    party_proc, coordinator_proc, recommend = demo_mod.party_proc, demo_mod.coordinator_proc, demo_mod._recommend

    def spy_party(*args: Any, **kwargs: Any) -> Proc:
        started.append(party_proc(*args, **kwargs))
        return started[-1]

    def spy_coordinator(*args: Any, **kwargs: Any) -> Proc:
        started.append(coordinator_proc(*args, **kwargs))
        return started[-1]

    def probe(http: httpx.Client, url: str, *args: Any) -> None:
        """While the federation is up: a client with the CA but no certificate reaches the coordinator and
        is refused by every party in the handshake."""
        ca = started[0].env["PARTY_TLS_CLIENT_CA_FILE"]
        with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=10) as bare:
            probed["coordinator"] = bare.get(f"{url}/health").status_code
            for proc in started[:-1]:
                with pytest.raises(httpx.TransportError):
                    bare.get(f"{proc.url}/health")
                probed[proc.name] = "refused"
        parties = http.get(f"{url}/v1/parties", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        probed["pins"] = {p["party_id"]: p["tls_name"] for p in parties}  # each party pinned to its own name
        recommend(http, url, *args)

    monkeypatch.setattr(demo_mod, "_dataset", small)
    monkeypatch.setattr(demo_mod, "party_proc", spy_party)
    monkeypatch.setattr(demo_mod, "coordinator_proc", spy_coordinator)
    monkeypatch.setattr(demo_mod, "_recommend", probe)
    printed = io.StringIO()
    monkeypatch.setattr(demo_mod, "console", Console(file=printed, width=240))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    demo_mod.demo(data=None, rounds=2, seed=0, keep=False, tls=True)
    out = printed.getvalue()

    assert [p.name for p in started] == ["party0", "party1", "party2", "coordinator"]
    assert all(p.url.startswith("https://127.0.0.1:") for p in started)
    assert started[-1].env["COORD_PARTY_CA_FILE"] == started[0].env["PARTY_TLS_CLIENT_CA_FILE"]
    assert probed == {"coordinator": 200, "party0": "refused", "party1": "refused", "party2": "refused",
                      "pins": {"party0": "party0", "party1": "party1", "party2": "party2"}}
    for proc in started[:-1]:
        assert f"ingested at {proc.url}" in out
    assert "mutual TLS" in out and "top-5 for user" in out
    assert "federated (served over HTTP, merged lists)" in out  # every test user's list through the fan-out
    for proc in started[:-1]:  # and each party's own list, from that party, beside the party alone
        assert f"{proc.name} served by {proc.name}" in out and f"{proc.name} alone: GNN (local-only" in out
        assert f"{proc.name} alone: EASE" in out
    assert "value report: validation NDCG@10 per slice" in out
    assert "demo finished" in out
