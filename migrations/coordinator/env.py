"""Alembic environment of the coordinator database (`alembic -n coordinator upgrade head`)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from services.db import coordinator_tables  # noqa: F401 - registers the tables
from services.db.base import CoordinatorBase

config = context.config
target_metadata = CoordinatorBase.metadata
VERSION_TABLE = "alembic_version_coordinator"


def _url() -> str:
    """The URL passed by the service, else COORD_DATABASE_URL; no default on purpose."""
    url = config.attributes.get("database_url") or os.environ.get("COORD_DATABASE_URL")
    if not url:
        raise RuntimeError("set COORD_DATABASE_URL or pass sqlalchemy.url")
    return str(url)


def run_migrations_offline() -> None:
    """Emit SQL without a connection."""
    context.configure(url=_url(), target_metadata=target_metadata, render_as_batch=True,
                      version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection (render_as_batch for SQLite ALTERs)."""
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                          version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url())
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True,
                          version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
