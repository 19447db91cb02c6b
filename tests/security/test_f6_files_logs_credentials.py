"""F6: databases, WAL files, logs and data folders are owner-only whatever the umask; access logs carry
no raw user ids; the coordinator keeps party credentials sealed, not in clear, in its database."""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.localfed import ADMIN, API_KEY, COORD_TOKEN, coordinator_proc, party_proc

USER = "alice-" + secrets.token_hex(4)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    root = tmp_path_factory.mktemp("f6")
    old = os.umask(0o022)  # the tester's umask: files 0644, folders 0755 unless the services say otherwise
    try:
        party = party_proc("p1", root)
        coord = coordinator_proc(root)
        party.start()
        coord.start()
    finally:
        os.umask(old)
    try:
        yield root, party.url, coord.url
    finally:
        party.stop()
        coord.stop()


def test_databases_wal_logs_and_folders_are_owner_only(procs: tuple[Path, str, str]) -> None:
    root, party, _ = procs
    auth = {"Authorization": f"Bearer {ADMIN}"}
    rows = {"rows": [{"user_id": USER, "item_id": "i1", "rating": 4}]}
    assert httpx.post(f"{party}/v1/interactions", headers=auth, json=rows).status_code == 200
    files = [root / "p1" / "party.db", root / "p1" / "party.db-wal", root / "p1" / "log.txt",
             root / "coordinator" / "coordinator.db", root / "coordinator" / "log.txt"]
    for path in files:
        assert path.exists() and _mode(path) == 0o600, (path, oct(_mode(path)))
    for folder in (root / "p1", root / "coordinator"):
        assert _mode(folder) == 0o700, (folder, oct(_mode(folder)))


def test_access_log_carries_no_raw_user_id(procs: tuple[Path, str, str]) -> None:
    root, party, _ = procs
    r = httpx.get(f"{party}/v1/users/{USER}/recommendations", headers={"X-API-Key": API_KEY})
    assert r.status_code in (404, 409)
    httpx.get(f"{party}/v1/users/{USER}", headers={"Authorization": f"Bearer {ADMIN}"})
    log = (root / "p1" / "log.txt").read_text()
    assert "/v1/users/u:" in log  # the requests were logged ...
    assert USER not in log  # ... without the id


def test_coordinator_database_holds_no_party_credential_in_clear(procs: tuple[Path, str, str]) -> None:
    root, party, coord = procs
    auth = {"Authorization": f"Bearer {ADMIN}"}
    body = {"party_id": "p1", "url": party, "token": COORD_TOKEN}
    assert httpx.post(f"{coord}/v1/parties", headers=auth, json=body).status_code == 201
    db = root / "coordinator" / "coordinator.db"
    with sqlite3.connect(db) as c:
        (stored,) = c.execute("SELECT token FROM parties WHERE party_id = 'p1'").fetchone()
    assert stored.startswith("sealed:v1:") and COORD_TOKEN not in stored
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            assert COORD_TOKEN.encode() not in path.read_bytes()
    key = db.with_name(db.name + ".key")
    assert key.exists() and _mode(key) == 0o600
    # The sealed credential still opens the party: the fan-out is answered by it (no model yet: 409 code).
    r = httpx.get(f"{coord}/v1/users/{USER}/recommendations", headers={"X-API-Key": API_KEY})
    # the party's own model_not_ready comes back (a refused credential would be 502 party_unavailable)
    assert r.status_code == 409 and r.json()["code"] == "model_not_ready", r.text
    if r.status_code == 200:
        assert "forbidden" not in r.text and "unauthorized" not in r.text
