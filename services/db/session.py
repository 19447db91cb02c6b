"""Engine, session factory and migration helpers shared by the services and their tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 60_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL + synchronous=NORMAL (a committed transaction survives a process kill, not power loss), secure_delete."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA secure_delete=ON")  # deleted rows (an erased user) are overwritten, not left in free pages
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def is_write_conflict(exc: BaseException) -> bool:
    """A failure caused by a concurrent writer (safe to retry): a row this transaction referred to was
    deleted under it (foreign key), a deadlock or serialization failure, or SQLite's lock held too long."""
    if isinstance(exc, DBAPIError):
        exc = exc.orig or exc
    name = type(exc).__name__
    message = str(exc).lower()
    if name in ("ForeignKeyViolation", "UniqueViolation", "DeadlockDetected", "SerializationFailure"):
        return True
    if name == "IntegrityError":  # sqlite3 (no subclasses): a foreign key or unique race
        return "foreign key" in message or "unique" in message
    return name == "OperationalError" and ("locked" in message or "deadlock" in message)


def owner_only_dir(path: Path) -> None:
    """Create a folder (and missing parents) readable by the owner only (0700), whatever the umask."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)


def owner_only_file(path: Path) -> None:
    """Create a file 0600 (its folder 0700) whatever the umask. SQLite gives the -wal and -shm files
    the database file's mode, so a database made this way keeps its WAL owner-only too."""
    if not path.parent.exists():
        owner_only_dir(path.parent)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    path.chmod(0o600)


def make_engine(database_url: str) -> Engine:
    """Create an engine for SQLite (file directory created, pragmas set) or PostgreSQL."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            owner_only_file(Path(url.database))
        # Bulk ingestion runs in worker threads; connections move between threads via the pool.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Session factory; objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


def upgrade(database_url: str, *, environment: Literal["party", "coordinator"] = "party") -> None:
    """Run the Alembic migrations of one environment up to head."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR / environment))
    # Passed as an attribute, not an ini option: URLs may contain '%' (configparser interpolation).
    config.attributes["database_url"] = database_url
    command.upgrade(config, "head")


def migrate(database_url: str) -> None:
    """Bring a party database to the current schema."""
    upgrade(database_url, environment="party")


def pending_migration(
    engine: Engine, *, environment: Literal["party", "coordinator"] = "party"
) -> str | None:
    """None when the database is reachable and at head; otherwise what is wrong."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS_DIR / environment)).get_current_head()
    try:
        with engine.connect() as connection:
            options = {"version_table": f"alembic_version_{environment}"}
            current = MigrationContext.configure(connection, opts=options).get_current_revision()
    except Exception as exc:  # noqa: BLE001 - readiness reports any connection failure
        return f"database unreachable: {type(exc).__name__}"
    if current != head:
        return f"database schema at {current}, expected {head}: run migrations"
    return None
