"""docs/operations.md's first walk (split → ingest → evaluation-split → run → score), run exactly as written.

The block between `<!-- walk -->` and `<!-- /walk -->` is run by bash against two party processes and a
coordinator process with non-dev secrets, ML-100K in $DATA; the run must report test figures of its served
round (u1.test labelled at the parties that hold each pair) and serve a top-10 through the coordinator.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from cli.localfed import Proc, free_port, start_all
from tests.support.identities import pin_peers
from tests.support.layout import DATA

ML100K = DATA / "ml-100k"
DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def walk_block() -> str:
    """The shell block of the walk, as the doc writes it."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- walk -->", 1)[1].split("<!-- /walk -->", 1)[0]
    found = re.search(r"```sh\n(.*?)```", block, re.DOTALL)
    assert found, "docs/operations.md: the walk's ```sh block"
    return found.group(1)


@pytest.mark.slow
@pytest.mark.timeout(2700)  # ingest, labels and a run over 100k ratings on a shared 2-core machine
def test_the_operations_walk_runs_as_written(tmp_path: Path) -> None:
    assert (ML100K / "u1.test").exists(), f"ML-100K is expected at {ML100K}"
    admin, party_admin, coordinator_token, api_key = (secrets.token_urlsafe(32) for _ in range(4))
    procs: dict[str, Proc] = {}
    for pid in ("party0", "party1"):
        home = tmp_path / pid
        home.mkdir()
        port = free_port()
        env = {"PARTY_PARTY_ID": pid, "PARTY_DATABASE_URL": f"sqlite:///{home / 'party.db'}",
               "PARTY_DATA_DIR": str(home), "PARTY_ADMIN_TOKEN": party_admin,
               "PARTY_COORDINATOR_TOKEN": coordinator_token, "PARTY_API_KEYS": json.dumps([api_key]),
               "PARTY_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
        procs[pid] = Proc(pid, f"http://127.0.0.1:{port}", env,
                          [sys.executable, "-m", "cli.main", "party", "serve", "--port", str(port)], home / "log.txt")
    pin_peers({pid: procs[pid].env for pid in procs})  # outside dev mode each party pins its peers' keys
    port = free_port()
    cenv = {"COORD_DATABASE_URL": f"sqlite:///{tmp_path / 'coordinator.db'}", "COORD_DATA_DIR": str(tmp_path),
            "COORD_ADMIN_TOKEN": admin, "COORD_API_KEYS": json.dumps([api_key]), "OMP_NUM_THREADS": "1"}
    procs["coordinator"] = Proc("coordinator", f"http://127.0.0.1:{port}", cenv,
                                [sys.executable, "-m", "cli.main", "coordinator", "serve", "--port", str(port)],
                                tmp_path / "coordinator.log")
    work = tmp_path / "operator"
    work.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "DATA": str(ML100K), "PARTY0_URL": procs["party0"].url, "PARTY1_URL": procs["party1"].url,
           "FEDREC_COORDINATOR_URL": procs["coordinator"].url, "PARTY_ADMIN_TOKEN": party_admin,
           "COORD_ADMIN_TOKEN": admin, "PARTY_COORDINATOR_TOKEN": coordinator_token, "API_KEY": api_key,
           "OMP_NUM_THREADS": "1"}
    try:
        start_all(list(procs.values()), timeout=180)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", walk_block()], check=False, cwd=work, env=env,
                              capture_output=True, text=True, timeout=2400)
    finally:
        for proc in procs.values():
            proc.stop()
    out = done.stdout
    assert done.returncode == 0, f"{out[-3000:]}\n{done.stderr[-3000:]}"
    labelled = [json.loads(line) for line in out.splitlines() if '"skipped_not_held"' in line]
    assert len(labelled) == 2 and sum(x["rows"] for x in labelled) == 20_000, labelled  # every u1.test pair, once
    assert all(x["skipped_not_held"] == 20_000 - x["rows"] for x in labelled)
    final = next(line for line in out.splitlines() if "served round" in line)
    assert "release-1 active" in final and re.search(r"test RMSE \d\.\d{4}", final), final
    served = json.loads(out.strip().splitlines()[-1])
    assert served["release_id"] == "release-1" and len(served["items"]) == 10, served
