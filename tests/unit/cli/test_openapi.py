"""`fedrec openapi party|coordinator --out FILE` writes the services' OpenAPI documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import openapi
from cli.main import app

runner = CliRunner()
OPERATION_ID = re.compile(r"^[a-z][a-z0-9_-]*-[a-z][a-z0-9_]*$")


@pytest.mark.parametrize("service", ["party", "coordinator"])
def test_export_writes_spec_with_stable_operation_ids(service: str, tmp_path: Path) -> None:
    out = tmp_path / "nested" / f"{service}.json"
    result = runner.invoke(app, ["openapi", service, "--out", str(out)])
    assert result.exit_code == 0, result.output
    spec = json.loads(out.read_text())
    assert spec["openapi"].startswith("3.") and "/health" in spec["paths"]
    ids = [op["operationId"] for path in spec["paths"].values() for op in path.values()]
    assert ids and len(ids) == len(set(ids))
    assert all(OPERATION_ID.match(i) for i in ids), ids
    assert f"wrote {out}" in result.stderr
    # Deterministic: a second export is byte-identical (diff-friendly committed specs).
    again = tmp_path / "again.json"
    assert runner.invoke(app, ["openapi", service, "--out", str(again)]).exit_code == 0
    assert again.read_bytes() == out.read_bytes()


def test_missing_app_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(openapi._APPS, "coordinator", "coordinator_api.does_not_exist")
    result = runner.invoke(app, ["openapi", "coordinator", "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 1
    assert "coordinator_api.does_not_exist.create_app is not available" in result.stderr
    assert not (tmp_path / "c.json").exists()
