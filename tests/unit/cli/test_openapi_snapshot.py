"""The OpenAPI specs committed in docs/ are the ones the apps serve (clients are generated from them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.openapi import Service, build_spec
from tests.support.layout import ROOT

DOCS = ROOT / "docs"


@pytest.mark.parametrize("service", ["party", "coordinator"])
def test_committed_spec_matches_app(service: Service, tmp_path: Path) -> None:
    """A route change must come with `make openapi` so generated clients stay in step."""
    committed = json.loads((DOCS / f"openapi-{service}.json").read_text())
    assert build_spec(service, data_dir=tmp_path) == committed
