"""Side information at a party: `fedrec party ingest --kind user-features|item-features`, the bulk routes,
one-line refusals that store nothing, and erasure of a user's attributes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from cli.main import app
from party_api.main import create_app
from services.db.session import make_engine, migrate
from services.party.features import load_features
from tests.support.party import ADMIN, Party, party_settings
from tests.support.servers import live_server

ML100K = Path("/work/shared/data/ml-100k")


def _ingest(party: Party, path: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["party", "ingest", str(path), "--url", party.url, "--token", ADMIN, *extra])
    return result.exit_code, result.output


def _stored(party: Party, kind: str) -> dict[tuple[str, str], set[object]]:
    with Session(party.engine) as session:
        out: dict[tuple[str, str], set[object]] = {}
        for r in load_features(session=session, kind=kind):  # type: ignore[arg-type]
            out.setdefault((r.entity_id, r.name), set()).add(r.text if r.text is not None else r.number)
        return out


def test_user_and_item_features_from_csv(party: Party, tmp_path: Path) -> None:
    users = tmp_path / "users.csv"
    users.write_text("user_id,age,occupation\nu1,24,technician\nu2,,writer\n")
    code, output = _ingest(party, users, "--kind", "user-features")
    assert code == 0, output
    assert '"entities": 2' in output and '"rows": 3' in output
    assert _stored(party, "user") == {("u1", "age"): {24.0}, ("u1", "occupation"): {"technician"},
                                      ("u2", "occupation"): {"writer"}}
    items = tmp_path / "items.csv"
    items.write_text("sku,price\ni1,9.5\n")
    assert _ingest(party, items, "--kind", "item-features", "--id-column", "sku")[0] == 0
    assert _stored(party, "item") == {("i1", "price"): {9.5}}
    # a new upload replaces the values of the users it names, and only theirs
    users.write_text("user_id,occupation\nu1,artist\n")
    assert _ingest(party, users, "--kind", "user-features")[0] == 0
    assert _stored(party, "user") == {("u1", "occupation"): {"artist"}, ("u2", "occupation"): {"writer"}}
    assert party.admin.get("/v1/features").json() == {"user": 2, "item": 1}


@pytest.mark.skipif(not (ML100K / "u.item").is_file(), reason="ML-100K not present")
def test_ml100k_user_and_item_files(party: Party) -> None:
    assert _ingest(party, ML100K / "u.user", "--kind", "user-features", "--format", "ml100k")[0] == 0
    code, output = _ingest(party, ML100K / "u.item", "--kind", "item-features", "--format", "ml100k")
    assert code == 0, output and '"entities": 1682' in output
    stored = _stored(party, "item")
    assert stored[("1", "genre")] == {"Animation", "Children's", "Comedy"} and stored[("1", "year")] == {1995.0}
    assert _stored(party, "user")[("1", "occupation")] == {"technician"}


@pytest.mark.parametrize(("text", "extra", "message"), [
    ("id,age\nu1,3\n", [], "unknown id column 'user_id' (columns: id, age)"),
    ("user_id,age\nu1,24\nu2,young\n", [], "column 'age' mixes types: 'young' is not a number but '24' is"),
    ("user_id,job\nu1,a\nu2,b\nu3,c\n", ["--max-categories", "2"],
     "column 'job' has 3 distinct values, over the cap of 2 (--max-categories)"),
])
def test_a_bad_feature_file_is_refused_in_one_line_and_stores_nothing(party: Party, tmp_path: Path, text: str,
                                                                       extra: list[str], message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, output = _ingest(party, path, "--kind", "user-features", *extra)
    assert code == 1
    assert output.count("\n") == 1 and output.startswith("error ") and message in output, output
    assert "Traceback" not in output and ADMIN not in output
    assert party.admin.get("/v1/features").json() == {"user": 0, "item": 0}


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Party]:
    """A party whose PARTY_FEATURE_MAX_CATEGORIES is 2."""
    url = f"sqlite:///{tmp_path / 'capped.db'}"
    migrate(url)
    settings = party_settings(url, feature_max_categories=2)
    engine = make_engine(url)
    with live_server(create_app(settings)) as server, httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
        yield Party(server.url, settings, admin, engine)
    engine.dispose()


def test_the_routes_refuse_bad_batches_with_field_and_reason(capped: Party) -> None:
    ok = capped.admin.post("/v1/features/users", json={"rows": [{"id": "u1", "name": "job", "text": "a"},
                                                                 {"id": "u2", "name": "job", "text": "b"}]})
    assert ok.status_code == 200 and ok.json() == {"kind": "user", "entities": 2, "rows": 2, "columns": ["job"]}
    over = capped.admin.post("/v1/features/users", json={"rows": [{"id": "u3", "name": "job", "text": "c"}]})
    assert over.status_code == 422 and "over the cap of 2" in over.json()["detail"]
    assert over.json()["field"] == "rows.job", over.json()
    mixed = capped.admin.post("/v1/features/users", json={"rows": [{"id": "u4", "name": "job", "number": 3}]})
    assert mixed.status_code == 422 and "mixes types" in mixed.json()["detail"]
    both = capped.admin.post("/v1/features/items", json={"rows": [{"id": "i", "name": "x", "text": "a", "number": 1}]})
    assert both.status_code == 422 and "exactly one of text" in both.text
    nan = capped.admin.post("/v1/features/items", content=b'{"rows": [{"id": "i", "name": "x", "number": NaN}]}',
                            headers={"Content-Type": "application/json"})
    assert nan.status_code == 422
    assert capped.admin.get("/v1/features").json() == {"user": 2, "item": 0}  # the refused batches changed nothing
    assert httpx.get(f"{capped.url}/v1/features").status_code == 401


def test_erasure_takes_a_users_features(party: Party) -> None:
    party.admin.post("/v1/interactions", json={"rows": [{"user_id": "u1", "item_id": "i1", "rating": 4}]})
    rows = [{"id": u, "name": "job", "text": "a"} for u in ("u1", "u2", "u3")]
    assert party.admin.post("/v1/features/users", json={"rows": rows}).status_code == 200
    assert party.admin.delete("/v1/users/u1").status_code == 200  # a user with interactions
    assert party.admin.delete("/v1/users/u2").status_code == 200  # a user known only by attributes
    assert set(_stored(party, "user")) == {("u3", "job")}
    assert party.admin.delete("/v1/users/u2").status_code == 404
