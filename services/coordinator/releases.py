"""Releases: each completed run's serving model, staged at its parties, then activated (two-phase publish).

A release is `staged` once created; it becomes `active` only when every party of its run stored the
model under its id and the promotion gate lets it (or an admin forces it); the release it replaces
becomes `retired` and may be activated again (a rollback, no gate). A release whose staging could not
even be asked of its parties is `failed`. The serving fan-out asks the parties for the active release
only, so answers of two releases are never merged.

Retention: after each activation only the `keep` newest releases (COORD_RELEASES_KEEP), the active one and
the newest other one that was ever active (the rollback target: `protected_ids`) stay; every older one becomes `pruned` (its record stays, its model is gone) and every party is told which
releases to keep, deleting the others' models and their runs' trainer snapshots and alignments.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.coordinator.client import PartyClient
from services.db.coordinator_tables import ReleaseRow
from services.errors import Conflict, NotFound, PartyUnavailable
from services.federation.fanout import fan_out

STAGED, ACTIVE, RETIRED, FAILED, PRUNED = "staged", "active", "retired", "failed", "pruned"
# The pooled validation figures of a round (the run's round metrics, a release's metrics) the gate compares.
VALID_RMSE, VALID_NDCG = "valid_rmse", "valid_ndcg@10"
Clients = Callable[[list[str]], dict[str, PartyClient]]


VALID_RMSE_TRAINED = "valid_rmse_trained"  # the run's own figure, kept beside the served one that replaces it


def served_rmse(answers: Mapping[str, Any]) -> float | None:
    """The pooled validation RMSE of the staged models as the parties serve them, from each party's
    `valid_sse` / `valid_count` (None unless at least one party reported and none is missing a figure
    it could have: a party with no validation ratings reports none and adds nothing)."""
    sse = count = 0.0
    for answer in answers.values():
        if not isinstance(answer, Mapping) or answer.get("valid_count") is None:
            continue
        sse, count = sse + float(answer["valid_sse"]), count + int(answer["valid_count"])
    return math.sqrt(sse / count) if count > 0 else None


def withheld(answers: Mapping[str, Any]) -> dict[str, str] | None:
    """Each party that left its validation figures out of its staging answer, with its reason (a run with
    dp_epsilon: they come from held-out ratings outside the DP accounting); None when no party did."""
    out = {p: str(a["withheld"]) for p, a in sorted(answers.items()) if isinstance(a, Mapping) and a.get("withheld")}
    return out or None


def figures(metrics: Mapping[str, float]) -> dict[str, float]:
    """The gate's figures among a round's metrics (the finite ones: a figure nobody reported is absent)."""
    return {k: float(metrics[k]) for k in (VALID_RMSE, VALID_NDCG)
            if metrics.get(k) is not None and math.isfinite(metrics[k])}


def gate(*, candidate: Mapping[str, float], active: Mapping[str, float] | None, rmse_tolerance: float,
         ndcg_tolerance: float) -> str | None:
    """Why a release with validation figures `candidate` may not replace the active one's (None: it may).

    Each figure the active release has is compared: the candidate's RMSE may exceed it by at most
    `rmse_tolerance`, its NDCG@10 fall below it by at most `ndcg_tolerance`; a candidate without that figure
    is held. A figure the active release lacks is not compared (an all-implicit federation has no RMSE; a
    release from before NDCG was reported has no NDCG). The reason names every failing figure, then the
    comparisons that passed, so both figures are in it.
    """
    if active is None:
        return None
    failed, passed = [], []
    for key, name, tolerance, worse in ((VALID_RMSE, "validation RMSE", rmse_tolerance, "worse than"),
                                        (VALID_NDCG, "validation NDCG@10", ndcg_tolerance, "below")):
        a, c = active.get(key), candidate.get(key)
        if a is None:
            continue
        if c is None:
            failed.append(f"no {name} to compare with the active release's {a:.4f}")
        elif (c > a + tolerance) if key == VALID_RMSE else (c < a - tolerance):
            failed.append(f"{name} {c:.4f} is {worse} the active release's {a:.4f} beyond the tolerance {tolerance:g}")
        else:
            passed.append(f"{name} {c:.4f} vs {a:.4f}: within {tolerance:g}")
    if not failed:
        return None
    return "; ".join(failed) + (f" ({'; '.join(passed)})" if passed else "")


def protected_ids(rows: list[ReleaseRow]) -> set[str]:
    """Releases retention never prunes: the active one, and the newest other one that was ever active (it passed
    the gate, or was forced or rolled back to): the way back, however many held releases come after it."""
    served = sorted((r for r in rows if r.activated_at is not None and r.state in (ACTIVE, RETIRED)),
                    key=lambda r: _aware(r.activated_at), reverse=True)
    out = {r.release_id for r in rows if r.state == ACTIVE}
    previous = next((r for r in served if r.state != ACTIVE), None)
    return out if previous is None else out | {previous.release_id}


def _aware(t: datetime | None) -> datetime:
    """A stored time as UTC-aware (SQLite drops the zone); the epoch for none."""
    if t is None:
        return datetime.fromtimestamp(0, UTC)
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def get(*, session: Session, release_id: str) -> ReleaseRow:
    """One release; 404 naming it when unknown."""
    row = session.get(ReleaseRow, release_id)
    if row is None:
        raise NotFound(f"release {release_id!r} not found", extra={"field": "release_id"})
    return row


def list_releases(*, session: Session) -> list[ReleaseRow]:
    """Every release, newest first."""
    return list(session.scalars(select(ReleaseRow).order_by(ReleaseRow.seq.desc())))


def active(*, session: Session) -> ReleaseRow | None:
    """The release the federation serves (None before the first activation)."""
    return session.scalar(select(ReleaseRow).where(ReleaseRow.state == ACTIVE))


def create(*, session: Session, run_id: str, round_index: int, metrics: dict[str, float],
           party_ids: list[str], warm_start_from: str | None = None) -> ReleaseRow:
    """The release of a completed run (the existing one when a resumed run publishes again)."""
    row = session.scalar(select(ReleaseRow).where(ReleaseRow.run_id == run_id))
    if row is not None:
        return row
    seq = int(session.scalar(select(func.max(ReleaseRow.seq))) or 0) + 1
    valid = metrics.get(VALID_RMSE)
    row = ReleaseRow(release_id=f"release-{seq}", seq=seq, run_id=run_id, round_index=round_index,
                     valid_rmse=valid if valid is not None and math.isfinite(valid) else None,
                     metrics=metrics, party_ids=sorted(party_ids), staged=[], state=STAGED, reason="staging",
                     warm_start_from=warm_start_from)
    session.add(row)
    session.commit()
    return row


def _set(session: Session, row: ReleaseRow, **fields: Any) -> None:
    for key, value in fields.items():
        setattr(row, key, value)
    session.commit()


class Releases:
    """Stages and activates releases at the parties; one activation at a time."""

    def __init__(self, *, sessions: sessionmaker[Session], clients: Clients, pool: ThreadPoolExecutor,
                 tolerance: float, lock: threading.Lock, keep: int = 5, ndcg_tolerance: float = 0.01) -> None:
        self.sessions, self.clients, self.pool = sessions, clients, pool
        self.tolerance, self.lock, self.keep = tolerance, lock, keep  # tolerance: validation RMSE's
        self.ndcg_tolerance = ndcg_tolerance

    def publish(self, *, run_id: str, party_ids: list[str], round_index: int,
                metrics: dict[str, float], warm_start_from: str | None = None) -> ReleaseRow:
        """Stage the run's model at every party under a new release, then activate it if the gate lets it."""
        with self.sessions() as session:
            row = create(session=session, run_id=run_id, round_index=round_index, metrics=metrics,
                         party_ids=party_ids, warm_start_from=warm_start_from)
            release_id = row.release_id
        clients = self.clients(party_ids)
        answers, failures = fan_out(self.pool, clients, lambda c: c.stage(run_id=run_id, round_index=round_index,
                                                                           release_id=release_id))
        failures.update({p: "not registered or disabled" for p in set(party_ids) - set(clients)})
        with self.sessions() as session:
            row = get(session=session, release_id=release_id)
            reason = "" if not failures else "not staged at " + "; ".join(
                f"{p} ({why})" for p, why in sorted(failures.items()))
            report = {p: [dict(r) for r in a.get("value") or [] if isinstance(r, dict)] for p, a in sorted(answers.items())}
            _set(session, row, staged=sorted(answers), reason=reason or "staged at every party",
                 value_report={p: rows for p, rows in report.items() if rows} or None,
                 value_withheld=withheld(answers))
            served = None if failures else served_rmse(answers)
            if served is not None:  # the gate compares what the parties serve (with their rating components)
                trained = {} if row.metrics.get(VALID_RMSE) is None else {VALID_RMSE_TRAINED: row.metrics[VALID_RMSE]}
                _set(session, row, valid_rmse=served, metrics={**row.metrics, **trained, VALID_RMSE: served})
        if failures:
            self.prune()
            return self.read(release_id)
        try:
            return self.activate(release_id=release_id, automatic=True)
        except (Conflict, PartyUnavailable):
            self.prune()  # retention counts held releases too
            return self.read(release_id)  # stays staged; the reason is in the record

    def read(self, release_id: str) -> ReleaseRow:
        """The release's current record (detached)."""
        with self.sessions() as session:
            row = get(session=session, release_id=release_id)
            session.expunge(row)
            return row

    def activate(self, *, release_id: str, force: bool = False, automatic: bool = False) -> ReleaseRow:
        """Serve a release at every party of its run; a retired one is a rollback (no gate), a staged one
        passes the gate unless forced, the active one is sent again. 409 with the reason when it may not;
        502 when a party did not switch."""
        with self.lock:
            with self.sessions() as session:
                row = get(session=session, release_id=release_id)
                current = active(session=session)
                previous = None if current is None else current.release_id
                parties, rollback, again = list(row.party_ids), row.state == RETIRED, row.state == ACTIVE
                if not again:
                    self._check(session, row, current, force=force)
            if again:  # already active: told again, so a party that missed it (or was switched) follows
                self._switch(release_id, parties, None)
                self.prune()
                return self.read(release_id)
            self._switch(release_id, parties, previous)
            with self.sessions() as session:
                if previous is not None:
                    _set(session, get(session=session, release_id=previous), state=RETIRED,
                         reason=f"replaced by {release_id}")
                how = "rollback" if rollback else ("forced past the gate" if force else
                                                   "passed the gate" if automatic or previous else "first release")
                _set(session, get(session=session, release_id=release_id), state=ACTIVE,
                     reason=f"active at every party ({how})", activated_at=datetime.now(UTC))
            self.prune()
            return self.read(release_id)

    def prune(self) -> dict[str, str]:
        """Apply retention: releases past the `keep` newest (never the active one, nor the one served before it:
        `protected_ids`) become `pruned`, and every
        party of any release is told the ids to keep; returns the parties that could not be told, with why.

        The parties get the ids to keep rather than to delete, so a party missed now catches up at the next prune.
        """
        with self.sessions() as session:
            rows = list_releases(session=session)
            protected = protected_ids(rows)
            kept = [r for i, r in enumerate(rows)
                    if r.state != PRUNED and (i < self.keep or r.release_id in protected)]
            for row in rows:
                if row.state != PRUNED and row not in kept:
                    _set(session, row, state=PRUNED, reason=f"pruned: older than the newest {self.keep} releases "
                                                            f"(COORD_RELEASES_KEEP); was {row.state}")
            keep_ids = sorted(r.release_id for r in kept)
            parties = sorted({p for r in rows for p in r.party_ids})
        clients = self.clients(parties)
        _, failures = fan_out(self.pool, clients, lambda c: c.prune_releases(keep=keep_ids))
        return failures

    def _check(self, session: Session, row: ReleaseRow, current: ReleaseRow | None, *, force: bool) -> None:
        """Refuse (409, reason kept in the record) a release that may not become active."""
        if row.state == PRUNED:
            raise Conflict(f"release {row.release_id} was pruned: {row.reason}", extra={"release_id": row.release_id})
        if row.state == FAILED:
            raise Conflict(f"release {row.release_id} failed: {row.reason}", extra={"release_id": row.release_id})
        missing = sorted(set(row.party_ids) - set(row.staged))
        if missing:
            raise Conflict(f"release {row.release_id} is not staged at {', '.join(missing)}: {row.reason}",
                           extra={"release_id": row.release_id})
        if row.state == STAGED and not force:
            why = gate(candidate=figures(row.metrics), active=None if current is None else figures(current.metrics),
                       rmse_tolerance=self.tolerance, ndcg_tolerance=self.ndcg_tolerance)
            if why is not None:
                _set(session, row, reason=f"held by the promotion gate: {why}")
                raise Conflict(f"release {row.release_id} held by the promotion gate: {why} "
                               "(force to override)", extra={"release_id": row.release_id})

    def _switch(self, release_id: str, parties: list[str], previous: str | None) -> None:
        """Activate at every party; if one fails, the others go back to `previous` and this raises."""
        clients = self.clients(parties)
        answers, failures = fan_out(self.pool, clients, lambda c: c.activate_release(release_id=release_id))
        failures.update({p: "not registered or disabled" for p in set(parties) - set(clients)})
        if not failures:
            return
        if previous is not None:
            # Best effort: the fan-out pins the active release, so a party left behind is reported, never merged.
            fan_out(self.pool, {p: clients[p] for p in answers},
                    lambda c: c.activate_release(release_id=previous))
        why = "; ".join(f"{p} ({r})" for p, r in sorted(failures.items()))
        with self.sessions() as session:
            _set(session, get(session=session, release_id=release_id), reason=f"activation failed at {why}")
        raise PartyUnavailable(f"release {release_id} not activated: {why}", extra={"release_id": release_id})
