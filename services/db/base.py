"""Declarative bases: one metadata per service database (party, coordinator)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, MetaData
from sqlalchemy.orm import DeclarativeBase

# Stable constraint names so Alembic batch migrations on SQLite can find them again.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT on PostgreSQL; plain INTEGER on SQLite so the primary key aliases the rowid.
IdType = BigInteger().with_variant(Integer(), "sqlite")


class PartyBase(DeclarativeBase):
    """Base of the party database tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class CoordinatorBase(DeclarativeBase):
    """Base of the coordinator database tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
