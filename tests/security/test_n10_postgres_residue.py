"""N10: on PostgreSQL an erased user's id stays in the table and index files (dead row versions) until
VACUUM FULL. Reproduced on a live party: erase over HTTP, the id is still in the files; the operator
command `fedrec party vacuum` rewrites them, after which it is gone. Reads the server's data files, so it
runs where the test server's data directory is readable (the CI container), and skips elsewhere."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from party_api.main import create_app
from services.db.session import make_engine, migrate
from tests.support.databases import postgres_schema_url
from tests.support.party import ADMIN, party_settings
from tests.support.servers import live_server

USER = "erased-" + secrets.token_hex(8)
pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


def _files(engine: Engine) -> list[Path]:
    """The heap and index files of the users table (they change on VACUUM FULL), flushed to disk."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("CHECKPOINT"))
        root = Path(c.execute(text("SHOW data_directory")).scalar_one())
        rels = c.execute(text("SELECT pg_relation_filepath(oid) FROM pg_class WHERE oid = 'users'::regclass "
                              "OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'users'::regclass)"))
        paths = [root / r[0] for r in rels]
    if not all(os.access(p, os.R_OK) for p in paths):
        pytest.skip("the PostgreSQL data directory is not readable here")
    return paths


def _no_older_snapshot(engine: Engine, *, deadline_s: float = 60.0) -> None:
    """VACUUM FULL keeps rows that an open transaction anywhere on the server may still see: wait (bounded)
    until no other session holds a snapshot older than now, naming the sessions if one stays."""
    end = time.monotonic() + deadline_s
    while True:
        with engine.connect() as c:
            holders = c.execute(text("SELECT pid, state, left(query, 80) FROM pg_stat_activity "
                                     "WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()")).all()
        if not holders or time.monotonic() > end:
            break
        time.sleep(0.5)
    assert not holders, f"sessions holding old snapshots keep the dead rows alive: {holders}"


def _holds(paths: list[Path], needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in paths)


def test_erased_ids_stay_in_postgres_files_until_party_vacuum(pg_url: str) -> None:
    migrate(pg_url)
    engine = make_engine(pg_url)
    try:
        with live_server(create_app(party_settings(pg_url))) as server, server.client() as c:
            auth = {"Authorization": f"Bearer {ADMIN}"}
            rows = {"rows": [{"user_id": USER, "item_id": "i1", "rating": 4},
                             {"user_id": "kept-user", "item_id": "i1", "rating": 3}]}
            assert c.post(f"{server.url}/v1/interactions", json=rows, headers=auth).status_code == 200
            assert c.delete(f"{server.url}/v1/users/{USER}", headers=auth).status_code == 200
            assert c.get(f"{server.url}/v1/users/{USER}", headers=auth).status_code == 404
        # The finding: erased at the API, still in the files.
        assert _holds(_files(engine), USER.encode())
        _no_older_snapshot(engine)
        done = subprocess.run([sys.executable, "-m", "cli.main", "party", "vacuum", "--database-url", pg_url],
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert b'"tables"' in done.stdout and b"users" in done.stdout
        after = _files(engine)
        assert not _holds(after, USER.encode())
        assert _holds(after, b"kept-user")  # live rows are kept
    finally:
        engine.dispose()


def test_vacuum_refuses_sqlite_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cli.main", "party", "vacuum", "--database-url",
                           f"sqlite:///{tmp_path / 'p.db'}"], capture_output=True, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 1 and "secure_delete" in err and "Traceback" not in err
