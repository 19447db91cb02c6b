"""A client generated from the exported party OpenAPI document talks to a live party server."""

from __future__ import annotations

import importlib
import json
import os
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from cli.main import app as cli_app
from party_api.main import create_app
from services.config import DEV_ADMIN_TOKEN, PartySettings
from services.crypto.secagg import SecAggParty
from services.data.synthetic import generate
from services.db.session import migrate
from tests.support.layout import DATA, ROOT
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
            "--config",
            str(ROOT / "docs" / "openapi-client.yaml"),
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


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "ml-100k" / "u1.base").is_file(), reason="shared data sets absent")
def test_generated_client_streams_ml100k_u1_and_a_run_trains_on_it(
    client_package: ModuleType, tmp_path: Path
) -> None:
    """u1.base split by item over two parties, each half streamed from a file by the generated bulk route."""
    from fedrec_party_client import AuthenticatedClient
    from fedrec_party_client.api.ingest import ingest_bulk_interactions
    from fedrec_party_client.models import IngestRead
    from fedrec_party_client.types import File

    from cli.localfed import ADMIN, COORD_TOKEN, CoordinatorClient
    from coordinator_api.main import create_app as coordinator_app
    from services.db.session import upgrade
    from tests.support.federation import TINY_CONFIG, coordinator_settings

    lines = (DATA / "ml-100k" / "u1.base").read_text().split("\n")
    rows = [line.split("\t") for line in lines if line.strip()]
    # outside dev mode each party pins its peer's identity key (trust on first use is dev mode only)
    party_secrets = {f"ml{k}": os.urandom(32) for k in range(2)}
    identities = {p: SecAggParty(party_id=p, secret=sec, run_id="any").identity for p, sec in party_secrets.items()}
    with ExitStack() as stack:
        parties = {}
        for k in range(2):
            pid = f"ml{k}"
            url = f"sqlite:///{tmp_path / f'{pid}.db'}"
            migrate(url)
            csv_file = tmp_path / f"{pid}.csv"
            mine = [r for r in rows if int(r[1]) % 2 == k]  # a vertical split: each party its own items
            csv_file.write_text("user_id,item_id,rating,timestamp\n" + "".join(",".join(r) + "\n" for r in mine))
            key = f"key-{pid}-{secrets.token_urlsafe(32)}"  # random: low-entropy keys are refused (P11)
            settings = PartySettings(party_id=pid, database_url=url, data_dir=tmp_path / pid, admin_token=ADMIN,
                                     coordinator_token=COORD_TOKEN, api_keys=[key],
                                     secret=party_secrets[pid].hex(),
                                     peer_identities={p: key for p, key in identities.items() if p != pid})
            server = stack.enter_context(live_server(create_app(settings)))
            admin = stack.enter_context(AuthenticatedClient(base_url=server.url, token=ADMIN, timeout=300))
            with csv_file.open("rb") as stream:  # httpx sends the open file in chunks
                report = ingest_bulk_interactions.sync(client=admin, body=File(payload=stream, file_name=csv_file.name))
            assert isinstance(report, IngestRead), report
            assert report.rows == len(mine) and report.items == len({r[1] for r in mine})
            parties[pid] = server
        assert sum(len([r for r in rows if int(r[1]) % 2 == k]) for k in range(2)) == 80_000
        curl = f"sqlite:///{tmp_path / 'coordinator.db'}"
        upgrade(curl, environment="coordinator")
        coordinator = stack.enter_context(live_server(coordinator_app(coordinator_settings(curl))))
        client = CoordinatorClient(coordinator.url)
        for pid, server in parties.items():
            client.register(pid, server.url)
        run = client.create_run(rounds=2, min_parties=2, seed=0, config=TINY_CONFIG)
        status = client.wait(run["run_id"], timeout=600)
    assert status["state"] == "completed", status["detail"]
    both = {r[0] for r in rows if int(r[1]) % 2 == 0} & {r[0] for r in rows if int(r[1]) % 2 == 1}
    assert status["n_users"] == len(both) and status["rounds_done"] == 2  # PSI: users of both parties
    assert 0.5 < status["rounds"][-1]["metrics"]["train_rmse"] < 2.0
