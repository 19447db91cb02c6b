"""Training runs (admin): create (202), status with per-round metrics and traffic, cancel."""

from __future__ import annotations

from fastapi import APIRouter

from api_common.errors import error_responses
from api_common.params import NamePath
from api_common.guard import body_class
from coordinator_api.deps import AdminDep, ManagerDep, SessionDep
from coordinator_api.schemas import RoundRead, TrainingRunCreate, TrainingRunRead
from services.coordinator import runs
from services.coordinator.runner import epsilon_spent, train_config
from services.db.coordinator_tables import RoundRow, RunRow
from services.privacy.report import privacy_report

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 404, 409, 422, 502))


def _read(run: RunRow, rounds: list[RoundRow]) -> TrainingRunRead:
    config = train_config(run.config, seed=run.seed, rounds=run.rounds_total)
    return TrainingRunRead(
        run_id=run.run_id, state=run.state, detail=run.detail, rounds_total=run.rounds_total,
        rounds_done=run.rounds_done, current_round=min(run.rounds_done, run.rounds_total - 1),
        min_parties=run.min_parties, seed=run.seed, party_ids=run.party_ids, excluded=run.excluded or {},
        n_users=run.n_users,
        config=run.config, privacy={**config.privacy_record(), "epsilon_spent": epsilon_spent(config, run.state)},
        privacy_report=privacy_report(config),
        bytes_sent=run.bytes_sent, bytes_received=run.bytes_received,
        rounds=[RoundRead(round_index=r.round_index, participants=r.participants, failures=r.failures,
                          metrics=r.metrics, bytes_sent=r.bytes_sent, bytes_received=r.bytes_received,
                          seconds=r.seconds) for r in rounds],
        created_at=run.created_at, updated_at=run.updated_at,
    )


@router.post("", response_model=TrainingRunRead, status_code=202, openapi_extra=body_class("small"))
def create_run(body: TrainingRunCreate, session: SessionDep, manager: ManagerDep) -> TrainingRunRead:
    """Create a run and start it in the background (409 while another run is active)."""
    manager.validate_config(body.config)
    run = runs.create(session=session, rounds=body.rounds, min_parties=body.min_parties, seed=body.seed,
                      config=body.config, party_ids=body.party_ids)
    manager.submit(run.run_id)
    return _read(run, [])


@router.get("", response_model=list[TrainingRunRead])
def list_runs(session: SessionDep) -> list[TrainingRunRead]:
    """All runs, newest first (without per-round history)."""
    return [_read(r, []) for r in runs.list_runs(session=session)]


@router.get("/{run_id}", response_model=TrainingRunRead)
def get_run(run_id: NamePath, session: SessionDep) -> TrainingRunRead:
    """Status of one run."""
    run = runs.get(session=session, run_id=run_id)
    return _read(run, runs.rounds_of(session=session, run_id=run_id))


@router.post("/{run_id}/cancel", response_model=TrainingRunRead, status_code=202)
def cancel_run(run_id: NamePath, session: SessionDep) -> TrainingRunRead:
    """Cancel a run; it stops after its current step."""
    run = runs.cancel(session=session, run_id=run_id)
    return _read(run, runs.rounds_of(session=session, run_id=run_id))
