"""A client generated from the exported party OpenAPI document talks to a live party server."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from cli.main import app as cli_app
from party_api.main import create_app
from services.config import DEV_ADMIN_TOKEN, PartySettings
from services.data.synthetic import generate
from services.db.session import migrate
from tests.support.servers import LiveServer, live_server

PACKAGE = "fedrec_party_client"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def client_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """Export the spec with the real CLI, generate a client package offline, import it."""
    root = tmp_path_factory.mktemp("generated")
    spec = root / "party-openapi.json"
    result = CliRunner().invoke(cli_app, ["openapi", "party", "--out", str(spec)])
    assert result.exit_code == 0, result.output
    assert "/v1/interactions" in json.loads(spec.read_text())["paths"]
    # The generator's post-hooks call ruff: put the venv's ruff on PATH (no network needed).
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    gen = subprocess.run(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(spec),
            "--output-path",
            str(root / PACKAGE),
            "--meta",
            "none",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert gen.returncode == 0, gen.stdout + gen.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture()
def party(tmp_path: Path) -> Iterator[LiveServer]:
    """A live party server on a migrated SQLite database."""
    url = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(url)
    settings = PartySettings(
        dev_mode=True, party_id="gen-client", database_url=url, data_dir=tmp_path / "data"
    )
    with live_server(create_app(settings)) as server:
        yield server


def _rows() -> list[dict[str, object]]:
    """300 distinct ratings from the synthetic generator."""
    ds = generate(60, 40, 300, seed=21, ratios=(1.0, 0.0, 0.0))
    r = ds.train
    return [
        {"user_id": u, "item_id": i, "rating": float(v), "timestamp": int(t)}
        for u, i, v, t in zip(
            r.user_ids.tolist(), r.item_ids.tolist(), r.ratings, r.timestamps, strict=True
        )
    ]


def test_generated_client_ingests_and_reads_summary(
    client_package: ModuleType, party: LiveServer
) -> None:
    from fedrec_party_client import AuthenticatedClient, Client
    from fedrec_party_client.api.health import health_liveness
    from fedrec_party_client.api.ingest import ingest_add_interactions
    from fedrec_party_client.api.summary import summary_get_counts, summary_get_summary
    from fedrec_party_client.models import (
        CountsRead,
        ErrorRead,
        IngestRead,
        InteractionBatchCreate,
        SummaryRead,
    )

    rows = _rows()
    with AuthenticatedClient(base_url=party.url, token=DEV_ADMIN_TOKEN) as admin:
        report = ingest_add_interactions.sync(
            client=admin, body=InteractionBatchCreate.from_dict({"rows": rows})
        )
        assert isinstance(report, IngestRead), report
        assert report.rows == 300
        assert report.users == len({r["user_id"] for r in rows})
        assert report.items == len({r["item_id"] for r in rows})

        counts = summary_get_counts.sync(client=admin)
        assert isinstance(counts, CountsRead)
        assert (counts.interactions, counts.users, counts.items) == (
            300,
            report.users,
            report.items,
        )

        summary = summary_get_summary.sync(client=admin)
        assert isinstance(summary, SummaryRead) and summary.party_id == "gen-client"
        histogram = {float(k): v for k, v in summary.rating_histogram.to_dict().items()}
        assert histogram == {
            float(k): v for k, v in Counter(float(r["rating"]) for r in rows).items()
        }

        # Re-rating the same pairs updates them: the count stays, the histogram moves.
        rerated = [{**r, "rating": 5.0} for r in rows[:50]]
        again = ingest_add_interactions.sync(
            client=admin, body=InteractionBatchCreate.from_dict({"rows": rerated})
        )
        assert isinstance(again, IngestRead) and again.rows == 50
        after = summary_get_summary.sync(client=admin)
        assert isinstance(after, SummaryRead) and after.counts.interactions == 300
        fives = {float(k): v for k, v in after.rating_histogram.to_dict().items()}.get(5.0, 0)
        assert fives == histogram.get(5.0, 0) + sum(1 for r in rows[:50] if r["rating"] != 5.0)

        # Typed error bodies: a rating outside the scale is a 422 naming the row and field.
        bad = [dict(rows[0], rating=9.0)]
        refused = ingest_add_interactions.sync_detailed(
            client=admin, body=InteractionBatchCreate.from_dict({"rows": bad})
        )
        assert refused.status_code == 422 and isinstance(refused.parsed, ErrorRead)
        assert "rating" in json.dumps(refused.parsed.to_dict())

    with AuthenticatedClient(base_url=party.url, token="wrong-token") as intruder:
        denied = summary_get_counts.sync_detailed(client=intruder)
        assert denied.status_code == 403 and isinstance(denied.parsed, ErrorRead)
    with Client(base_url=party.url) as anonymous:
        assert health_liveness.sync_detailed(client=anonymous).status_code == 200
