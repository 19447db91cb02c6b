"""Training-run records: create, read, cancel, per-round history and public-parameter checkpoints."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services.db.coordinator_tables import CheckpointRow, PartyRow, RoundRow, RunRow
from services.errors import Conflict, NotFound, ValidationFailed

PENDING, ALIGNING, RUNNING, PAUSED = "pending", "aligning", "running", "paused"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
ACTIVE_STATES = (PENDING, ALIGNING, RUNNING, PAUSED)
FINAL_STATES = (COMPLETED, FAILED, CANCELLED)
KEEP_CHECKPOINTS = 2


@dataclass
class RoundRecord:
    """What the runner records after a completed round."""

    round_index: int
    participants: list[str]
    failures: dict[str, str]
    metrics: dict[str, float]
    bytes_sent: dict[str, int] = field(default_factory=dict)
    bytes_received: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def create(
    *, session: Session, rounds: int, min_parties: int, seed: int, config: dict[str, Any],
    party_ids: list[str] | None = None, warm_start_from: str | None = None, max_minutes: float | None = None,
    publish_on_stop: bool = True,
) -> RunRow:
    """Create a pending run over the given (default: all enabled) parties; 409 if a run is active."""
    active = session.scalar(select(RunRow).where(RunRow.state.in_(ACTIVE_STATES)))
    if active is not None:
        raise Conflict(f"run {active.run_id} is still {active.state}", extra={"run_id": active.run_id})
    party_ids = run_parties(session=session, party_ids=party_ids, min_parties=min_parties)
    run = RunRow(run_id=uuid.uuid4().hex[:16], state=PENDING, detail="queued", config=config,
                 party_ids=list(party_ids), rounds_total=rounds, rounds_done=0, min_parties=min_parties,
                 seed=seed, bytes_sent={}, bytes_received={}, cancel_requested=False,
                 warm_start_from=warm_start_from, max_minutes=max_minutes, publish_on_stop=publish_on_stop)
    session.add(run)
    session.commit()
    return run


def run_parties(*, session: Session, party_ids: list[str] | None, min_parties: int) -> list[str]:
    """The parties of a new run (default: all enabled); 422 naming the field if unknown or fewer than min_parties."""
    if party_ids is None:
        rows = session.scalars(select(PartyRow).where(PartyRow.enabled.is_(True)).order_by(PartyRow.party_id))
        party_ids = [r.party_id for r in rows]
    else:
        known = {r.party_id for r in session.scalars(select(PartyRow).where(PartyRow.party_id.in_(party_ids)))}
        unknown = sorted(set(party_ids) - known)
        if unknown:
            raise ValidationFailed(f"unknown parties {unknown}", extra={"field": "party_ids"})
    if len(party_ids) < max(min_parties, 1):
        raise ValidationFailed(f"{len(party_ids)} parties registered, min_parties is {min_parties}",
                               extra={"field": "min_parties"})
    return list(party_ids)


def get(*, session: Session, run_id: str) -> RunRow:
    """One run; 404 if unknown."""
    run = session.get(RunRow, run_id)
    if run is None:
        raise NotFound(f"run {run_id!r} does not exist", extra={"field": "run_id"})
    return run


def list_runs(*, session: Session, limit: int | None = None, offset: int = 0) -> list[RunRow]:
    """Runs newest first (ties by id, so pages do not overlap); `limit` None: all of them."""
    query = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.run_id.desc()).offset(offset)
    return list(session.scalars(query if limit is None else query.limit(limit)))


def rounds_of(*, session: Session, run_id: str) -> list[RoundRow]:
    """Completed rounds of a run in order."""
    return list(session.scalars(select(RoundRow).where(RoundRow.run_id == run_id).order_by(RoundRow.round_index)))


def cancel(*, session: Session, run_id: str, publish: bool | None = None) -> RunRow:
    """Ask a run to stop after its current step; a finished run answers 409.

    The runner then publishes the run's best round as a release (gated), unless `publish` is false (None: as
    the run was created). A pending run has no round to publish: it ends at once.
    """
    run = get(session=session, run_id=run_id)
    if run.state in FINAL_STATES:
        raise Conflict(f"run {run_id} is already {run.state}", extra={"run_id": run_id})
    run.cancel_requested = True
    if publish is not None:
        run.publish_on_stop = publish
    if run.state == PENDING or (run.state == PAUSED and not run.publish_on_stop):
        run.state, run.detail = CANCELLED, "cancelled by admin"
    session.commit()
    return run


def set_state(*, session: Session, run_id: str, state: str, detail: str = "", **fields: Any) -> RunRow:
    """Move a run to a state with a human-readable detail."""
    run = get(session=session, run_id=run_id)
    run.state, run.detail = state, detail
    for key, value in fields.items():
        setattr(run, key, value)
    session.commit()
    return run


def record_round(*, session: Session, run_id: str, record: RoundRecord, checkpoint: bytes,
                 keep_round: int | None = None) -> None:
    """Atomically store a completed round, its checkpoint and the run's progress (the resume point).

    The last KEEP_CHECKPOINTS checkpoints are kept, and `keep_round`'s (the best round's, for its release).
    """
    run = get(session=session, run_id=run_id)
    session.merge(RoundRow(run_id=run_id, round_index=record.round_index, participants=record.participants,
                           failures=record.failures, metrics=record.metrics, bytes_sent=record.bytes_sent,
                           bytes_received=record.bytes_received, seconds=record.seconds))
    session.merge(CheckpointRow(run_id=run_id, round_index=record.round_index, state=checkpoint))
    session.execute(delete(CheckpointRow).where(CheckpointRow.run_id == run_id,
                                                CheckpointRow.round_index <= record.round_index - KEEP_CHECKPOINTS,
                                                CheckpointRow.round_index != (-1 if keep_round is None else keep_round)))
    run.rounds_done = record.round_index + 1
    sent, recv = dict(run.bytes_sent), dict(run.bytes_received)
    for pid, n in record.bytes_sent.items():
        sent[pid] = sent.get(pid, 0) + n
    for pid, n in record.bytes_received.items():
        recv[pid] = recv.get(pid, 0) + n
    run.bytes_sent, run.bytes_received = sent, recv
    session.commit()


def add_traffic(*, session: Session, run_id: str, sent: dict[str, int], received: dict[str, int]) -> None:
    """Add traffic outside rounds (alignment, configuration, publishing) to the run totals."""
    run = get(session=session, run_id=run_id)
    s, r = dict(run.bytes_sent), dict(run.bytes_received)
    for pid, n in sent.items():
        s[pid] = s.get(pid, 0) + n
    for pid, n in received.items():
        r[pid] = r.get(pid, 0) + n
    run.bytes_sent, run.bytes_received = s, r
    session.commit()


def latest_checkpoint(*, session: Session, run_id: str) -> tuple[int, bytes] | None:
    """(round_index, state bytes) of the newest checkpoint, or None before the first round."""
    row = session.scalar(select(CheckpointRow).where(CheckpointRow.run_id == run_id)
                         .order_by(CheckpointRow.round_index.desc()).limit(1))
    return None if row is None else (row.round_index, row.state)


def checkpoint_of(*, session: Session, run_id: str, round_index: int) -> bytes | None:
    """The checkpoint taken after one round (None when it was not kept)."""
    row = session.get(CheckpointRow, (run_id, round_index))
    return None if row is None else row.state


def resumable(*, session: Session) -> list[str]:
    """Runs a restarted coordinator must pick up again."""
    rows = session.scalars(select(RunRow).where(RunRow.state.in_((PENDING, ALIGNING, RUNNING, PAUSED))))
    # a run cancelled while no coordinator ran it still publishes its best round (it stops at once)
    return [r.run_id for r in rows if not r.cancel_requested or (r.publish_on_stop and r.rounds_done > 0)]
