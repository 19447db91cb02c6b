"""Database fixtures: one storage suite over SQLite and PostgreSQL (isolated schema per test)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from services.db.session import make_engine, make_sessionmaker, migrate

POSTGRES_URL = os.environ.get(
    "FEDREC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
PARTY_TABLES = ("users", "items", "interactions", "social_links")


def _postgres_or_skip() -> Engine:
    """An engine on the test server; unreachable fails under CI=true and skips otherwise."""
    engine = make_engine(POSTGRES_URL)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any connection failure means "unreachable"
        engine.dispose()
        message = f"PostgreSQL unreachable at {POSTGRES_URL}: {type(exc).__name__}: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return engine


def postgres_schema_url() -> Iterator[str]:
    """A URL whose search_path is a fresh schema, dropped afterwards (parallel runs never clash)."""
    admin = _postgres_or_skip()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database, not migrated: a SQLite file or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'party.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def party_url(database_url: str) -> str:
    """A migrated party database."""
    migrate(database_url)
    return database_url


@pytest.fixture
def engine(party_url: str) -> Iterator[Engine]:
    """Engine on the migrated party database."""
    engine = make_engine(party_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """Session factory on the migrated party database."""
    return make_sessionmaker(engine)


def snapshot(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the party data tables, ordered: equal snapshots mean nothing changed."""
    out: dict[str, list[tuple[object, ...]]] = {}
    with engine.connect() as connection:
        for table in PARTY_TABLES:
            rows = connection.execute(text(f"SELECT * FROM {table} ORDER BY id"))
            out[table] = [tuple(r) for r in rows]
    return out
