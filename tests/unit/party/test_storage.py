"""Party storage suite: the same tests on SQLite and PostgreSQL (see tests/support/databases.py)."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.db.party_tables import Interaction, Item, User
from services.db.session import make_engine, migrate, pending_migration
from services.errors import NotFound, ValidationFailed
from services.party import catalog, erasure
from services.party.ingest import ingest_records, ingest_stream
from tests.support.databases import snapshot
from tests.support.layout import ROOT

Sessions = sessionmaker[Session]


def load(
    sessions: Sessions,
    body: str,
    *,
    kind: str = "interactions",
    fmt: str = "csv",
    batch_rows: int = 50_000,
) -> object:
    """Run one streamed ingestion request on a fresh session."""
    with sessions() as session:
        return ingest_stream(
            session=session,
            body=io.BytesIO(body.encode()),
            kind=kind,  # type: ignore[arg-type]
            fmt=fmt,
            rating_min=1.0,
            rating_max=5.0,
            batch_rows=batch_rows,  # type: ignore[arg-type]
        )


def ratings(engine: Engine) -> dict[tuple[str, str], tuple[float, int | None]]:
    """(user external id, item external id) → (rating, ts) as stored."""
    sql = text(
        "SELECT u.external_id, i.external_id, x.rating, x.ts FROM interactions x "
        "JOIN users u ON u.id = x.user_id JOIN items i ON i.id = x.item_id"
    )
    with engine.connect() as connection:
        return {(u, i): (r, t) for u, i, r, t in connection.execute(sql)}


def rejected(
    sessions: Sessions, engine: Engine, body: str, **kwargs: object
) -> list[dict[str, object]]:
    """Assert a request is refused and leaves every table as it was; return its row errors."""
    before = snapshot(engine)
    with pytest.raises(ValidationFailed) as info:
        load(sessions, body, **kwargs)  # type: ignore[arg-type]
    assert snapshot(engine) == before
    errors: list[dict[str, object]] = info.value.extra["errors"]
    return errors


def test_migrations_reach_head_and_are_idempotent(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert pending_migration(engine) is not None
        migrate(database_url)
        migrate(database_url)  # second run is a no-op
        assert pending_migration(engine) is None
    finally:
        engine.dispose()


def test_migrations_match_the_table_models(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from services.db.base import PartyBase

    migrate(database_url)
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": "alembic_version_party"})
            assert compare_metadata(context, PartyBase.metadata) == []
    finally:
        engine.dispose()


def test_csv_ingest_maps_external_ids_and_upserts(sessions: Sessions, engine: Engine) -> None:
    report = load(
        sessions, "user_id,item_id,rating,timestamp\nu1,i1,4,100\nu1,i2,5,101\nu2,i1,3,102\n"
    )
    assert (report.rows, report.users, report.items) == (3, 2, 2)  # type: ignore[attr-defined]
    load(sessions, "user_id,item_id,rating\nu1,i1,2\nu3,i2,1\n")  # u1/i1 is a re-rating
    assert ratings(engine) == {
        ("u1", "i1"): (2.0, None),
        ("u1", "i2"): (5.0, 101),
        ("u2", "i1"): (3.0, 102),
        ("u3", "i2"): (1.0, None),
    }
    with sessions() as session:
        assert catalog.counts(session=session) == catalog.Counts(3, 2, 4, 0)


def test_unique_user_item_pair_is_enforced_by_the_schema(sessions: Sessions) -> None:
    load(sessions, "user_id,item_id,rating\nu1,i1,4\n")
    with sessions() as session:
        user = session.scalar(select(User.id))
        item = session.scalar(select(Item.id))
        session.add(Interaction(user_id=user, item_id=item, rating=3.0))
        with pytest.raises(IntegrityError):
            session.commit()


def test_ndjson_and_json_records(sessions: Sessions, engine: Engine) -> None:
    load(sessions, '{"user_id": "u1", "item_id": 7, "rating": 4.5, "timestamp": 9}\n', fmt="ndjson")
    with sessions() as session:
        ingest_records(
            session=session,
            records=[{"user_id": 2, "item_id": "7", "rating": 1}],
            kind="interactions",
            rating_min=1.0,
            rating_max=5.0,
        )
    assert ratings(engine) == {("u1", "7"): (4.5, 9), ("2", "7"): (1.0, None)}


def test_quoted_csv_fields(sessions: Sessions, engine: Engine) -> None:
    load(sessions, 'user_id,item_id,rating\r\n"smith, j",i1,3\r\nu2,"i ""x""",4\r\n')
    assert set(ratings(engine)) == {("smith, j", "i1"), ("u2", 'i "x"')}


def test_one_bad_row_among_10000_stores_nothing(sessions: Sessions, engine: Engine) -> None:
    load(sessions, "user_id,item_id,rating\nkeep,i0,3\n")
    rows = [f"u{k},i{k % 97},{1 + k % 5}" for k in range(10_000)]
    rows[7_321] = "u7321,i1,6"
    errors = rejected(
        sessions, engine, "user_id,item_id,rating\n" + "\n".join(rows), batch_rows=1_000
    )
    assert errors == [{"row": 7_322, "field": "rating", "reason": "6.0 outside [1.0, 5.0]"}]


def test_row_errors_are_named_and_nothing_is_stored(sessions: Sessions, engine: Engine) -> None:
    load(sessions, "user_id,item_id,rating\nkeep,i0,3\n")
    body = "user_id,item_id,rating\nu1,i1,4\nu2,i1,abc\nu3\nu4,,2\nu5,i1,nan\nu1,i1,2\n"
    errors = rejected(sessions, engine, body)
    assert [(e["row"], e["field"]) for e in errors] == [
        (2, "rating"),
        (3, None),
        (4, "item_id"),
        (5, "rating"),
        (6, None),
    ]
    assert "also on row 1" in str(errors[4]["reason"])


@pytest.mark.parametrize(
    "header, field",
    [
        ("user_id,item_id,rating,colour", "colour"),
        ("user_id,rating", "item_id"),
        ("user_id,item_id,rating,rating", "rating"),
    ],
)
def test_bad_header_is_rejected(
    sessions: Sessions, engine: Engine, header: str, field: str
) -> None:
    errors = rejected(sessions, engine, f"{header}\nu1,i1,4\n")
    assert errors[0]["row"] == 0 and errors[0]["field"] == field


def test_malformed_bodies_are_rejected(sessions: Sessions, engine: Engine) -> None:
    assert rejected(sessions, engine, "")[0]["row"] == 0
    assert "malformed CSV" in str(
        rejected(sessions, engine, 'user_id,item_id,rating\n"u1,i1,4\n')[0]["reason"]
    )
    ndjson = (
        '{"user_id": "u1", "item_id": "i1", "rating": 3}\n{"user_id": "u2", "item": 1}\nnot json\n'
    )
    errors = rejected(sessions, engine, ndjson, fmt="ndjson")
    assert [(e["row"], e["field"]) for e in errors] == [
        (2, "item"),
        (2, "item_id"),
        (2, "rating"),
        (3, None),
    ]


def test_error_in_a_late_batch_rolls_back_earlier_batches(
    sessions: Sessions, engine: Engine
) -> None:
    rows = [f"u{k},i{k},3" for k in range(5_000)] + ["u0,i0,4"]  # duplicate of row 1
    errors = rejected(
        sessions, engine, "user_id,item_id,rating\n" + "\n".join(rows), batch_rows=500
    )
    assert errors[0]["row"] == 5_001 and "also on row 1" in str(errors[0]["reason"])
    assert snapshot(engine)["interactions"] == []


def test_social_links_and_erasure(sessions: Sessions, engine: Engine) -> None:
    load(sessions, "user_id,item_id,rating\nalice,i1,4\nbob,i1,2\nalice,i2,5\n")
    load(
        sessions,
        "src_user_id,dst_user_id,weight\nalice,bob,1\nbob,alice,0.5\nbob,carol,1\n",
        kind="social_links",
    )
    errors = rejected(
        sessions, engine, "src_user_id,dst_user_id\ncarol,carol\ncarol,dan\n", kind="social_links"
    )
    assert errors == [{"row": 1, "field": "dst_user_id", "reason": "a user cannot link to itself"}]
    with sessions() as session:
        assert catalog.get_user(session=session, external_id="alice") == catalog.UserRecord(
            "alice", 2, 2
        )
        gone = erasure.erase_user(session=session, external_id="alice")
    assert gone == erasure.Erasure("alice", 2, 2)
    after = snapshot(engine)
    assert ratings(engine) == {("bob", "i1"): (2.0, None)}
    assert len(after["social_links"]) == 1 and len(after["items"]) == 2
    assert "alice" not in {row[1] for row in after["users"]}
    with sessions() as session, pytest.raises(NotFound):
        erasure.erase_user(session=session, external_id="alice")


def test_summary_histogram_and_items_metadata(sessions: Sessions) -> None:
    load(sessions, "user_id,item_id,rating\nu1,i1,4\nu2,i1,4\nu1,i2,3.5\nu3,i3,1\n")
    with sessions() as session:
        assert (
            catalog.upsert_items(
                session=session,
                items=[
                    {"external_id": "i1", "metadata": {"t": "A"}},
                    {"external_id": "i9", "metadata": None},
                ],
            )
            == 2
        )
        s = catalog.summary(
            session=session, party_id="p", role="ratings", rating_min=1.0, rating_max=5.0
        )
        meta = session.scalar(select(Item.meta).where(Item.external_id == "i1"))
    assert s.rating_histogram == {"1": 1, "3.5": 1, "4": 2}
    assert s.counts == catalog.Counts(3, 4, 4, 0)
    assert meta == {"t": "A"}


def test_unreachable_postgres_fails_under_ci(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.support.databases"]')
    pytester.makepyfile("def test_pg(database_url):\n    pass\n")
    env = {"FEDREC_TEST_POSTGRES_URL": "postgresql+psycopg://postgres@127.0.0.1:1/none"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**env, "CI": "true"}.items():
            mp.setenv(key, value)
        mp.setenv("PYTHONPATH", str(ROOT))
        assert pytester.runpytest_subprocess("-p", "no:cacheprovider").parseoutcomes() == {
            "passed": 1,
            "errors": 1,
        }
        mp.setenv("CI", "false")
        outcomes = pytester.runpytest_subprocess("-p", "no:cacheprovider").parseoutcomes()
        assert outcomes == {"passed": 1, "skipped": 1}
