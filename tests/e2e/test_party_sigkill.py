"""A party killed with SIGKILL mid-upload restarts with every committed batch and no partial one."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.localfed import free_port, wait_healthy

ADMIN = "kill-test-admin-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "text/csv"}



def _start(
    command: list[str], db: Path, port: int, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a party process and wait until it is ready."""
    env = {
        **os.environ,
        "PARTY_DATABASE_URL": f"sqlite:///{db}",
        "PARTY_ADMIN_TOKEN": ADMIN,
        "PARTY_COORDINATOR_TOKEN": "kill-test-coordinator-token-0123456789abcdef",
        "PARTY_PORT": str(port),
        "PARTY_INGEST_BATCH_ROWS": "5000",
        "PARTY_DEV_MODE": "false",
    }
    proc = subprocess.Popen(command, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=60, proc=proc, log=log, path="/ready")
    except RuntimeError as exc:
        proc.kill()
        pytest.fail(str(exc))
    return proc, url


def _batch(tag: str, n: int) -> bytes:
    rows = "".join(f"{tag}{k},i{k % 300},{1 + k % 5},{k}\n" for k in range(n))
    return ("user_id,item_id,rating,timestamp\n" + rows).encode()


def _wal_state(db: Path) -> tuple[int, int]:
    wal = db.with_name(db.name + "-wal")
    stat = wal.stat()
    return stat.st_size, stat.st_mtime_ns


@pytest.mark.slow
def test_sigkill_mid_upload_keeps_committed_batches_only(tmp_path: Path) -> None:
    db, log, port = tmp_path / "party.db", tmp_path / "party.log", free_port()
    proc, url = _start([sys.executable, "-m", "party_api"], db, port, log)
    try:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
            for b in range(3):
                client.post(
                    "/v1/interactions/bulk", content=_batch(f"c{b}-", 10_000)
                ).raise_for_status()
        started = threading.Event()

        def slow_body() -> Iterator[bytes]:
            yield b"user_id,item_id,rating,timestamp\n"
            for chunk in range(400):
                yield "".join(f"k{chunk}-{k},i{k},3,1\n" for k in range(5_000)).encode()
                if chunk == 30:
                    started.set()
                time.sleep(0.02)

        def upload() -> None:
            try:
                httpx.post(
                    f"{url}/v1/interactions/bulk", content=slow_body(), headers=HEADERS, timeout=120
                )
            except httpx.HTTPError:
                pass  # the server dies under it

        wal_before = _wal_state(db)
        uploader = threading.Thread(target=upload, daemon=True)
        uploader.start()
        assert started.wait(60)
        time.sleep(1.0)
        # The open transaction has reached the disk (WAL written), so the kill lands mid-batch.
        assert _wal_state(db) != wal_before
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        uploader.join(30)

        fedrec = Path(sys.executable).with_name("fedrec")
        proc, url = _start([str(fedrec), "party", "serve"], db, port, log)
        counts = httpx.get(f"{url}/v1/counts", headers=HEADERS).json()
        assert counts == {"users": 30_000, "items": 300, "interactions": 30_000, "social_links": 0}
    finally:
        proc.kill()
        proc.wait(10)
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        partial = connection.execute(
            "SELECT count(*) FROM users WHERE external_id LIKE 'k%'"
        ).fetchone()
        assert partial == (0,)
