"""Operator maintenance of a party database: clearing what an erasure leaves in PostgreSQL's files.

PostgreSQL deletes by marking row versions dead: an erased user's ids stay in the table and index
files until the pages are rewritten, and in the WAL until its segments are recycled. VACUUM FULL
rewrites every party table and its indexes from the live rows only; a CHECKPOINT afterwards lets the
server recycle the WAL segments that still hold the deleted rows. SQLite needs neither: the party
opens it with secure_delete, which overwrites deleted rows in place.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import make_url, text

from services.db import party_tables  # noqa: F401 - registers the party tables on PartyBase
from services.db.base import PartyBase
from services.db.session import make_engine


@dataclass(frozen=True)
class VacuumReport:
    """What `vacuum_party` rewrote, and whether the checkpoint ran (it needs pg_checkpoint or superuser)."""

    tables: list[str]
    checkpoint: bool


SQLITE_NOTE = "vacuum is for PostgreSQL: SQLite party databases overwrite deleted rows (secure_delete)"


def is_postgres(database_url: str) -> bool:
    """Whether the URL names a PostgreSQL database (the only backend `vacuum_party` works on)."""
    return make_url(database_url).get_backend_name() == "postgresql"


def vacuum_party(*, database_url: str) -> VacuumReport:
    """VACUUM FULL every party table, then try a CHECKPOINT (PostgreSQL; see `is_postgres`)."""
    if not is_postgres(database_url):
        raise ValueError(SQLITE_NOTE)
    tables = sorted(PartyBase.metadata.tables)
    engine = make_engine(database_url)
    try:
        # VACUUM cannot run inside a transaction block.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            for table in tables:
                connection.execute(text(f'VACUUM FULL "{table}"'))
            try:
                connection.execute(text("CHECKPOINT"))
                checkpoint = True
            except Exception:  # noqa: BLE001 - a role without the privilege: reported, not fatal
                checkpoint = False
    finally:
        engine.dispose()
    return VacuumReport(tables, checkpoint)
