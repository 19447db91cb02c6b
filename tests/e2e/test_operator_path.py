"""The README's by-hand path, as an operator takes it: separate processes, non-dev secrets, the CLI, no settings.

`fedrec data split` of ML-100K u1.base over two parties, `fedrec party ingest` of each file, `fedrec
coordinator register-party`, `fedrec coordinator create --wait` with nothing else; then every u1.test
user's merged top-10 through the coordinator, scored against u1.test (NDCG@10, relevant: rating ≥ 4).
The demo's figure is 0.434 and most-popular's 0.245; the bar is 0.40.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from cli.localfed import Proc, free_port, start_all
from services.evaluation.ranking import RELEVANT_THRESHOLD, ndcg_at_k
from tests.support.identities import pin_peers
from tests.support.layout import DATA

ML100K = DATA / "ml-100k"


def _fedrec(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    done = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, f"fedrec {' '.join(args[:3])} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.slow
def test_by_hand_default_run_serves_a_top_10_worth_serving(tmp_path: Path) -> None:
    assert (ML100K / "u1.base").exists(), f"ML-100K is expected at {ML100K} (../shared/data beside the repository)"
    admin, coordinator_token, api_key = (secrets.token_urlsafe(32) for _ in range(3))
    parties: dict[str, Proc] = {}
    for pid in ("books", "films"):
        home = tmp_path / pid
        home.mkdir()
        port = free_port()
        env = {"PARTY_PARTY_ID": pid, "PARTY_DATABASE_URL": f"sqlite:///{home / 'party.db'}",
               "PARTY_DATA_DIR": str(home), "PARTY_ADMIN_TOKEN": admin, "PARTY_COORDINATOR_TOKEN": coordinator_token,
               "PARTY_API_KEYS": json.dumps([api_key]), "PARTY_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
        parties[pid] = Proc(pid, f"http://127.0.0.1:{port}", env,
                            [sys.executable, "-m", "cli.main", "party", "serve", "--port", str(port)], home / "log.txt")
    pin_peers({pid: proc.env for pid, proc in parties.items()})  # outside dev mode each party pins its peers' keys
    port = free_port()
    cenv = {"COORD_DATABASE_URL": f"sqlite:///{tmp_path / 'coordinator.db'}", "COORD_DATA_DIR": str(tmp_path),
            "COORD_ADMIN_TOKEN": admin, "COORD_API_KEYS": json.dumps([api_key]), "OMP_NUM_THREADS": "1"}
    coordinator = Proc("coordinator", f"http://127.0.0.1:{port}", cenv,
                       [sys.executable, "-m", "cli.main", "coordinator", "serve", "--port", str(port)],
                       tmp_path / "coordinator.log")
    try:
        start_all([*parties.values(), coordinator])
        _fedrec("data", "split", str(ML100K / "u1.base"), "--out", str(tmp_path / "split"), "--parties", "2")
        for k, (pid, proc) in enumerate(parties.items()):
            _fedrec("party", "ingest", str(tmp_path / "split" / f"party{k}.csv"), "--url", proc.url, "--token", admin)
            _fedrec("coordinator", "register-party", pid, proc.url, "--url", coordinator.url, "--token", admin,
                    "--party-token", coordinator_token)
        out = _fedrec("coordinator", "create", "--url", coordinator.url, "--token", admin, "--wait")
        assert "completed" in out, out
        lists = _served_lists(coordinator.url, api_key)
    finally:
        for proc in [coordinator, *parties.values()]:
            proc.stop()
    relevant = _relevant(ML100K / "u1.test")
    scores = [ndcg_at_k(lists[u], relevant[u], 10) for u in sorted(relevant) if u in lists]
    ndcg = float(np.mean(scores))
    print(f"by-hand default run: served NDCG@10 {ndcg:.4f} over {len(scores)} u1.test users")
    assert len(scores) >= 0.95 * len(relevant)
    assert ndcg >= 0.40


def _relevant(path: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        user, item, rating, _ = line.split("\t")
        if float(rating) >= RELEVANT_THRESHOLD:
            out.setdefault(user, set()).add(item)
    return out


def _served_lists(url: str, api_key: str) -> dict[str, list[str]]:
    """Every u1.base user's merged top-10 from the coordinator (items are unique across the two parties)."""
    users = sorted({line.split("\t")[0] for line in (ML100K / "u1.base").read_text().splitlines()})
    lists: dict[str, list[str]] = {}
    with httpx.Client(timeout=30, headers={"X-API-Key": api_key}) as http:
        for user in users:
            resp = http.get(f"{url}/v1/users/{user}/recommendations", params={"k": 10})
            if resp.status_code == 200:
                lists[user] = [it["item_id"] for it in resp.json()["items"]]
    return lists
