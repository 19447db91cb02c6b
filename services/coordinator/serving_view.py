"""What the serving fan-out needs of the database, cached: the enabled parties (credentials opened) and the active release.

A merged top-K used to open a session, run two queries and open two sealed credentials per request.
`ServingView` keeps them in memory instead. Every commit of this process that touches the registry or
the releases (an API route, a run's activation) drops the cached copy at once (`watch`: SQLAlchemy
session events on the app's session factory); a change made by another process (a second coordinator
on the same database) is seen within `max_age_s`. The reload runs in a worker thread, one at a time,
so the event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from services.coordinator import registry, releases
from services.coordinator.registry import PartyEndpoint
from services.db.coordinator_tables import PartyRow, ReleaseRow

_WATCHED = (PartyRow, ReleaseRow)
_DIRTY = "serving_view_dirty"


@dataclass(frozen=True)
class Directory:
    """The enabled parties by id and the active release (None before the first one), as of one read."""

    parties: dict[str, PartyEndpoint]
    release_id: str | None


def read_directory(session: Session) -> Directory:
    """The enabled parties and the active release, read now."""
    row = releases.active(session=session)
    parties = {p.party_id: p for p in registry.list_parties(session=session) if p.enabled}
    return Directory(parties, None if row is None else row.release_id)


class ServingView:
    """The cached Directory; `get()` reloads it when a watched commit dropped it or it is older than `max_age_s`."""

    def __init__(self, sessions: sessionmaker[Session], *, max_age_s: float = 1.0) -> None:
        self.sessions, self.max_age_s = sessions, max_age_s
        self._cached: Directory | None = None
        self._loaded_at = 0.0
        self._generation = 0  # bumped by every watched commit: a read begun before it is stale
        self._lock = threading.Lock()
        self._reload: asyncio.Lock | None = None

    def invalidate(self) -> None:
        """Drop the cached copy (a party or a release changed)."""
        with self._lock:
            self._generation += 1
            self._cached = None

    def _fresh(self) -> Directory | None:
        cached = self._cached
        return cached if cached is not None and time.monotonic() - self._loaded_at < self.max_age_s else None

    def _load(self) -> Directory:
        with self._lock:
            generation = self._generation
        started = time.monotonic()
        with self.sessions() as session:
            directory = read_directory(session)
        with self._lock:
            if generation == self._generation:  # no watched commit meanwhile: the read is current
                self._cached, self._loaded_at = directory, started
        return directory

    async def get(self) -> Directory:
        """The current directory (from memory unless it had to be read again)."""
        cached = self._fresh()
        if cached is not None:
            return cached
        if self._reload is None:
            self._reload = asyncio.Lock()
        async with self._reload:  # concurrent requests wait for one read
            cached = self._fresh()
            return cached if cached is not None else await asyncio.to_thread(self._load)

    def watch(self, sessions: sessionmaker[Session]) -> None:
        """Invalidate on every commit of a session of `sessions` that added, changed or deleted a party or release."""

        def flushed(session: Session, _context: Any) -> None:
            if any(isinstance(o, _WATCHED) for o in (*session.new, *session.dirty, *session.deleted)):
                session.info[_DIRTY] = True

        def committed(session: Session) -> None:
            if session.info.pop(_DIRTY, False):
                self.invalidate()

        event.listen(sessions, "after_flush", flushed)
        event.listen(sessions, "after_commit", committed)
