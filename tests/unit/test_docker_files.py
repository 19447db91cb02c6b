"""Docker files stay consistent with the code: compose wiring, secrets, entrypoint commands."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from tests.support.layout import ROOT

BIN = Path(sys.executable).parent


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_coordinator_three_parties_and_one_postgres() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "coordinator", "party-a", "party-b", "party-c"}
    created = set(
        re.findall(r"CREATE DATABASE (\w+);", (ROOT / "docker/initdb/01-databases.sql").read_text())
    )
    dbs = []
    for name, svc in services.items():
        if name == "postgres":
            continue
        env = svc["environment"]
        prefix = "COORD_" if name == "coordinator" else "PARTY_"
        assert svc["command"] == ["coordinator" if name == "coordinator" else "party"]
        assert all(k.startswith(prefix) for k in env), env
        url = env[f"{prefix}DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
        dbs.append(url.rsplit("/", 1)[1])
        assert "/health" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
        # Secrets only by interpolation from .env, never literal values in the file.
        for key, value in env.items():
            if key.endswith(("_TOKEN", "_KEYS")):
                assert str(value).startswith("${") and ":?" in str(value), (name, key)
    assert len(set(dbs)) == 4 and set(dbs) <= created


def test_env_example_names_every_interpolated_variable() -> None:
    used = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert used == example


def test_dockerfile_pins_cpu_torch_and_uses_the_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in text
    assert 'ENTRYPOINT ["/app/docker-entrypoint.sh"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "var", "data", ".pytest_cache"} <= set(ignored)


def _entrypoint(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "APP_DIR": str(ROOT),
        **env,
    }
    return subprocess.run(
        ["sh", str(ROOT / "docker-entrypoint.sh"), *args],
        env=full_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_entrypoint_rejects_unknown_service(tmp_path: Path) -> None:
    result = _entrypoint(["nonsense"], tmp_path)
    assert result.returncode == 64 and "party|coordinator" in result.stderr


@pytest.mark.parametrize(("service", "prefix"), [("party", "PARTY_"), ("coordinator", "COORD_")])
def test_entrypoint_migrates_then_reaches_the_serve_command(
    service: str, prefix: str, tmp_path: Path
) -> None:
    db = tmp_path / f"{service}.db"
    # `--help` as the extra serve option: the entrypoint migrates for real, then serve prints usage.
    result = _entrypoint(
        [service, "--help"], tmp_path, **{f"{prefix}DATABASE_URL": f"sqlite:///{db}"}
    )
    assert result.returncode == 0, result.stderr
    assert "--host" in result.stdout and "--port" in result.stdout
    with closing(sqlite3.connect(db)) as conn:
        tables = {
            row[0] for row in conn.execute("select name from sqlite_master where type='table'")
        }
    assert any(t.startswith("alembic_version") for t in tables) and len(tables) > 1, tables
