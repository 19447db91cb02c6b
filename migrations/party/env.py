"""Alembic environment of the party database."""

from __future__ import annotations

import os

from alembic import context

from services.db.party_tables import PartyBase
from services.db.session import make_engine

config = context.config
VERSION_TABLE = "alembic_version_party"


def _database_url() -> str:
    """URL from the caller (attribute or ini option) or PARTY_DATABASE_URL; there is no default."""
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    url = url or os.environ.get("PARTY_DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: pass sqlalchemy.url or set PARTY_DATABASE_URL")
    return str(url)


def run_offline() -> None:
    """Emit SQL without a connection."""
    context.configure(
        url=_database_url(),
        target_metadata=PartyBase.metadata,
        literal_binds=True,
        render_as_batch=True,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Migrate through a live connection."""
    engine = make_engine(_database_url())
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=PartyBase.metadata,
                render_as_batch=True,
                version_table=VERSION_TABLE,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
