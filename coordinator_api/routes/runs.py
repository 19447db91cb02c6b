"""Training runs (admin): create (202), status with per-round metrics and traffic, cancel."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import ValidationError

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import NamePath
from coordinator_api.deps import AdminDep, ManagerDep, SessionDep
from coordinator_api.schemas import RoundRead, RunCancel, TrainingRunCreate, TrainingRunRead
from services.coordinator import runs
from services.coordinator.run_config import start_run
from services.coordinator.runner import epsilon_spent, run_contract
from services.db.coordinator_tables import RoundRow, RunRow
from services.errors import Conflict, DomainError
from services.privacy.report import run_report

DEFAULT_PAGE, MAX_PAGE = 100, 1000  # GET /v1/runs: a listing is bounded however many runs schedules start

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 404, 409, 422, 502))
log = logging.getLogger("fedrec.coordinator")


def _read(run: RunRow, rounds: list[RoundRow]) -> TrainingRunRead:
    config = run_contract(run.config, seed=run.seed, rounds=run.rounds_total)
    return TrainingRunRead(
        run_id=run.run_id, state=run.state, detail=run.detail, rounds_total=run.rounds_total,
        rounds_done=run.rounds_done, current_round=min(run.rounds_done, run.rounds_total - 1),
        min_parties=run.min_parties, seed=run.seed, party_ids=run.party_ids, excluded=run.excluded or {},
        n_users=run.n_users, warm_start_from=run.warm_start_from, max_minutes=run.max_minutes,
        publish_on_stop=run.publish_on_stop,
        config=run.config, privacy={**config.privacy_record(), "epsilon_spent": epsilon_spent(config, run.state)},
        privacy_report=run_report(config.config),
        bytes_sent=run.bytes_sent, bytes_received=run.bytes_received,
        rounds=[RoundRead(round_index=r.round_index, participants=r.participants, failures=r.failures,
                          metrics=r.metrics, bytes_sent=r.bytes_sent, bytes_received=r.bytes_received,
                          seconds=r.seconds) for r in rounds],
        created_at=run.created_at, updated_at=run.updated_at,
    )


@router.post("", response_model=TrainingRunRead, status_code=202, openapi_extra=body_class("small"))
def create_run(body: TrainingRunCreate, session: SessionDep, manager: ManagerDep) -> TrainingRunRead:
    """Create a run from a preset and settings, and start it in the background (409 while another run is active).

    The settings are resolved and checked and the run's privacy guarantee computed before anything is stored.
    """
    run = start_run(session=session, manager=manager, config=body.config, preset=body.preset, rounds=body.rounds,
                    min_parties=body.min_parties, seed=body.seed, party_ids=body.party_ids,
                    warm_start=body.warm_start, max_minutes=body.max_minutes,
                    publish_on_stop=body.publish_on_stop)
    return _read(run, [])


def _read_stored(run: RunRow, rounds: list[RoundRow]) -> TrainingRunRead | None:
    """A run as stored; one whose privacy figures cannot be computed from its settings is shown without them.

    Runs are checked before they are stored, but rows written by older versions or by hand may not be:
    one such row must never break the listing (issue 23, N8). None if even its plain fields are unreadable.
    """
    try:
        return _read(run, rounds)
    except (DomainError, ValidationError, ArithmeticError, LookupError, AttributeError, ValueError, TypeError) as exc:
        log.warning("run %s: privacy figures unavailable: %s: %s", run.run_id, type(exc).__name__, exc)
    try:
        return TrainingRunRead(
            run_id=run.run_id, state=run.state, detail=run.detail, rounds_total=run.rounds_total,
            rounds_done=run.rounds_done, current_round=max(0, min(run.rounds_done, run.rounds_total - 1)),
            min_parties=run.min_parties, seed=run.seed, party_ids=run.party_ids,
            excluded=run.excluded if isinstance(run.excluded, dict) else {}, n_users=run.n_users,
            warm_start_from=run.warm_start_from,
            config=run.config if isinstance(run.config, dict) else {},
            privacy={"unreadable": "this coordinator cannot compute the privacy figures of the run's stored "
                                   "settings (invalid, or a protocol without a privacy report)"},
            privacy_report={}, bytes_sent=run.bytes_sent, bytes_received=run.bytes_received, rounds=[],
            created_at=run.created_at, updated_at=run.updated_at)
    except (ValidationError, TypeError, ValueError) as exc:
        log.warning("run %s: stored row unreadable, left out of the answer: %s", run.run_id, exc)
        return None


@router.get("", response_model=list[TrainingRunRead])
def list_runs(session: SessionDep,
              limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="runs per page")] = DEFAULT_PAGE,
              offset: Annotated[int, Query(ge=0, le=2**31, description="runs to skip (newest first)")] = 0,
              ) -> list[TrainingRunRead]:
    """Runs newest first, one page (`limit`, `offset`), without per-round history; a run whose stored row is
    unreadable is left out."""
    page = runs.list_runs(session=session, limit=limit, offset=offset)
    return [r for r in (_read_stored(run, []) for run in page) if r is not None]


@router.get("/{run_id}", response_model=TrainingRunRead)
def get_run(run_id: NamePath, session: SessionDep) -> TrainingRunRead:
    """Status of one run."""
    run = runs.get(session=session, run_id=run_id)
    read = _read_stored(run, runs.rounds_of(session=session, run_id=run_id))
    if read is None:
        raise Conflict(f"run {run_id} is stored in a form this coordinator cannot read", extra={"run_id": run_id})
    return read


@router.post("/{run_id}/cancel", response_model=TrainingRunRead, status_code=202)
def cancel_run(run_id: NamePath, session: SessionDep, body: RunCancel | None = None) -> TrainingRunRead:
    """Cancel a run; it stops after its current step and publishes its best round as a release (gated) unless
    told not to."""
    run = runs.cancel(session=session, run_id=run_id, publish=None if body is None else body.publish)
    return _read(run, runs.rounds_of(session=session, run_id=run_id))
