"""The in-memory serving snapshot: built from the database once per change, refreshed off the request path.

`ModelCache.get()` is what a serving request reads: a dict lookup and an attribute read, no query.
A daemon thread reads the generation token (one primary-key read) every `refresh_s` seconds and
rebuilds the snapshot when it changed, so every process serving one party database picks up a
publish, an ingest or an erasure made by another within `refresh_s` plus the rebuild. In the
process that made the change it is immediate: the publish route rebuilds before answering and
erasure drops the user from the snapshot at once (`forget_user`).

After each rebuild the same thread precomputes every user's top-K (`services.party.hot_path.build`)
and swaps in the snapshot with them; until then a request scores its user's row itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import chain
from typing import TypeVar

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.db.party_tables import Interaction, Item, ModelArtifact, User
from services.errors import Conflict
from services.party import fed_store, hot_path
from services.party.serving import ARTIFACT_NAME, ServingModel, Snapshot, generation, served

T = TypeVar("T")
log = logging.getLogger(__name__)
FETCH_ROWS = 100_000


def _ids(session: Session, column_id: object, column_ext: object) -> tuple[np.ndarray, list[str]]:
    rows = session.execute(select(column_id, column_ext).order_by(column_id)).all()  # type: ignore[call-overload]
    return np.fromiter((r[0] for r in rows), np.int64, len(rows)), [str(r[1]) for r in rows]


def _pairs(session: Session) -> tuple[np.ndarray, np.ndarray]:
    """(user db id, item db id) of every interaction, fetched in chunks straight into arrays."""
    # The DBAPI cursor, not ORM rows: a million Row objects cost ~40 s, plain tuples ~1 s.
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(f"SELECT user_id, item_id FROM {Interaction.__tablename__}")
        blocks = []
        while rows := cursor.fetchmany(FETCH_ROWS):
            blocks.append(np.fromiter(chain.from_iterable(rows), np.int64, 2 * len(rows)))
    finally:
        cursor.close()
    flat = np.concatenate(blocks) if blocks else np.empty(0, np.int64)
    return flat[0::2], flat[1::2]


def _lookup(sorted_ids: np.ndarray, values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """values[position of key in sorted_ids], -1 where the key is absent."""
    if len(sorted_ids) == 0:
        return np.full(len(keys), -1, np.int64)
    pos = np.clip(np.searchsorted(sorted_ids, keys), 0, len(sorted_ids) - 1)
    return np.where(sorted_ids[pos] == keys, values[pos], -1)


def _held_out(session: Session, user_ext: list[str], item_index: dict[str, int]) -> np.ndarray:
    """(user row · M + model item) keys of the ratings labelled test."""
    rows = {u: i for i, u in enumerate(user_ext)}
    m = len(item_index)
    return np.array([rows[u] * m + item_index[i] for u, items in fed_store.test_items_by_user(session=session).items()
                     if u in rows for i in items if i in item_index], np.int64)


def build_snapshot(*, session: Session) -> Snapshot | None:
    """Read the served model (the active release's, else the newest), the users, the items and every rating
    into a Snapshot (None before a publish)."""
    token = generation(session=session)  # read first: a write committed after it triggers another rebuild
    found = served(session=session)
    if found is None:
        return None
    version, release_id = found
    row = session.scalar(select(ModelArtifact).where(ModelArtifact.name == ARTIFACT_NAME,
                                                     ModelArtifact.version == version))
    assert row is not None and row.payload is not None
    model = ServingModel.from_bytes(row.payload)
    item_index = {str(x): i for i, x in enumerate(model.item_ids.tolist())}
    model_users = {str(u): i for i, u in enumerate(model.user_ids.tolist())}
    user_db, user_ext = _ids(session, User.id, User.external_id)
    item_db, item_ext = _ids(session, Item.id, Item.external_id)
    item_model = np.array([item_index.get(x, -1) for x in item_ext], np.int64)
    pair_users, pair_items = _pairs(session)
    rows = _lookup(user_db, np.arange(len(user_db)), pair_users)
    cols = _lookup(item_db, item_model, pair_items)
    keep = (rows >= 0) & (cols >= 0)  # ratings of items outside the model are not candidates
    rows, cols = rows[keep], cols[keep]
    held = _held_out(session, user_ext, item_index)
    if len(held):
        # Ratings labelled test were held out of training: they stay candidates.
        keep = ~np.isin(rows * len(item_index) + cols, held)
        rows, cols = rows[keep], cols[keep]
    order = np.argsort(rows, kind="stable")
    ptr = np.zeros(len(user_db) + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=len(user_db)), out=ptr[1:])
    counts = np.bincount(cols, minlength=len(item_index)).astype(np.int64)
    return Snapshot(
        version=version, token=token, release_id=release_id, model=model, item_index=item_index,
        user_rows={u: i for i, u in enumerate(user_ext)},
        model_row=np.array([model_users.get(u, -1) for u in user_ext], np.int64),
        rated_ptr=ptr, rated_idx=cols[order], popular=np.argsort(-counts, kind="stable"), counts=counts)


class ModelCache:
    """The current Snapshot of one party database, refreshed by a poller thread; reads take no lock."""

    def __init__(self, *, sessions: sessionmaker[Session], refresh_s: float = 1.0, threads: int = 2,
                 on_load: Callable[[Snapshot], None] | None = None,
                 on_hot: Callable[[Snapshot], None] | None = None) -> None:
        self.sessions = sessions
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="serving")
        self.refresh_s = refresh_s
        self.on_load, self.on_hot = on_load, on_hot
        self._snapshot: Snapshot | None = None
        self._pending: Snapshot | None = None  # a snapshot whose top-K lists the poller builds next
        self._build_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self) -> Snapshot:
        """The snapshot to serve from; built on first use; 409 while no model has been published."""
        snap = self._snapshot or self.refresh(only_if_missing=True)
        if snap is None:
            raise Conflict("no trained model has been published at this party yet",
                           extra={"code": "model_not_ready"})
        return snap

    def peek(self) -> Snapshot | None:
        """The snapshot served now, without building one (None before the first build)."""
        return self._snapshot

    async def run(self, work: Callable[[], T]) -> T:
        """Run scoring work on the serving executor (never on the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, work)

    def refresh(self, *, only_if_missing: bool = False) -> Snapshot | None:
        """Rebuild from the database now and swap the result in (publish, the poller, first use)."""
        with self._build_lock:
            if only_if_missing and self._snapshot is not None:
                return self._snapshot
            with self.sessions() as session:
                snap = build_snapshot(session=session)
            if snap is not None and self.on_load is not None:
                self.on_load(snap)
            self._snapshot = self._pending = snap
            return snap

    def warm(self) -> Snapshot | None:
        """Build the pending snapshot's top-K lists now and serve from them (the poller calls this)."""
        pending, self._pending = self._pending, None  # claimed: a failure is not retried every poll
        if pending is None:
            return None
        hot = hot_path.build(pending.model.scorer, pending.model_row, pending.rated_ptr, pending.rated_idx,
                             stop=lambda: not _same_data(self._snapshot, pending))
        with self._build_lock:
            current = self._snapshot
            if hot is None or current is None or not _same_data(current, pending):
                return None  # rebuilt meanwhile: the poller builds the new one's lists
            self._snapshot = snap = replace(current, hot=hot)  # erasures made meanwhile are kept
        if self.on_hot is not None:
            self.on_hot(snap)
        return snap

    def current(self) -> Snapshot:
        """`get`, after a rebuild if the database changed since this process built its snapshot.

        A caller that expects another release than the one served asks this way: an activation made
        through another process is seen at once rather than after the next poll.
        """
        snap = self.get()
        with self.sessions() as session:
            changed = generation(session=session) != snap.token
        return (self.refresh() or snap) if changed else snap

    def forget_user(self, user_id: str) -> None:
        """An erased user is unknown from now on, before the next rebuild (called after the erasure committed)."""
        # Under the build lock: a rebuild that read the database before the commit is patched here too.
        with self._build_lock:
            if self._snapshot is not None:
                self._snapshot = self._snapshot.without_user(user_id)
        self._wake.set()

    def mark_stale(self) -> None:
        """Data changed in this process (ingest): rebuild soon, in the background."""
        self._wake.set()

    def start(self) -> None:
        """Start the poller thread (the app's lifespan)."""
        self._thread = threading.Thread(target=self._poll, name="serving-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the poller thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.refresh_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._check(force=woken)
                self.warm()
            except Exception:
                log.exception("serving cache refresh failed")
                time.sleep(self.refresh_s)

    def _check(self, *, force: bool) -> None:
        snap = self._snapshot
        if snap is None and not force:
            return  # nothing served yet: the first request builds it
        if not force:
            with self.sessions() as session:
                if generation(session=session) == (snap.token if snap else None):
                    return
        self.refresh()


def _same_data(snap: Snapshot | None, built: Snapshot) -> bool:
    """Whether `snap` serves the arrays `built` was made of (the same build, users erased since aside)."""
    return snap is not None and snap.rated_ptr is built.rated_ptr and snap.model is built.model
