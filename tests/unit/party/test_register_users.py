"""catalog.register_users on SQLite and PostgreSQL: chunked, idempotent, one transaction, serving notified."""

from __future__ import annotations

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from services.db.party_tables import User
from services.party import catalog
from services.party.ingest import ingest_records
from services.party.serving import generation

Sessions = sessionmaker[Session]


def test_register_users_in_chunks_counts_created_and_existing(sessions: Sessions, engine: Engine) -> None:
    with sessions() as session:
        ingest_records(session=session, records=[{"user_id": "u3", "item_id": "i", "rating": 4}],
                       kind="interactions", rating_min=1.0, rating_max=5.0)
        before = generation(session=session)
    ids = [f"u{k}" for k in range(12_000)]  # more than one ID_CHUNK
    with sessions() as session:
        got = catalog.register_users(session=session, external_ids=[*ids, "u5", "u5"])
        assert got == catalog.Registration(users=12_000, created=11_999, existing=1)
        assert generation(session=session) != before  # serving rebuilds with the new users
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(User)) == 12_000
        again = catalog.register_users(session=session, external_ids=ids[:7_000])
        assert again == catalog.Registration(users=7_000, created=0, existing=7_000)
        assert catalog.get_user(session=session, external_id="u3").interactions == 1
