"""Schedules (admin): runs started by a cron expression or an interval; create, list, delete."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy.orm import Session

from api_common.errors import error_responses
from api_common.guard import body_class
from api_common.params import NamePath
from coordinator_api.deps import AdminDep, SessionDep, SettingsDep
from coordinator_api.schemas import ScheduleCreate, ScheduleRead, TrainingRunCreate
from services.coordinator import runs, schedules
from services.coordinator.run_config import resolve_run, start_run
from services.coordinator.runner import RunManager
from services.db.coordinator_tables import ScheduleRow

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], dependencies=[AdminDep],
                   responses=error_responses(401, 403, 404, 409, 422))
RUN_FIELDS = set(TrainingRunCreate.model_fields)


def launcher(manager: RunManager) -> schedules.Launch:
    """What a firing calls: the stored settings read as a POST /v1/runs body, then the route's own start_run."""

    def launch(session: Session, settings: dict[str, Any]) -> str:
        body = TrainingRunCreate.model_validate_json(json.dumps(settings))
        run = start_run(session=session, manager=manager, config=body.config, preset=body.preset,
                        rounds=body.rounds, min_parties=body.min_parties, seed=body.seed, party_ids=body.party_ids,
                        warm_start=body.warm_start)
        return run.run_id

    return launch


def _read(row: ScheduleRow, scheduler: schedules.Scheduler) -> ScheduleRead:
    return ScheduleRead(schedule_id=row.schedule_id, cron=row.cron, interval_seconds=row.interval_seconds,
                        run_settings=row.run_settings, fire_count=row.fire_count, skipped_count=row.skipped_count,
                        last_fired_at=row.last_fired_at, last_outcome=row.last_outcome, last_run_id=row.last_run_id,
                        next_fire_at=scheduler.next_fire_at(row.schedule_id), created_at=row.created_at)


def _scheduler(request: Request) -> schedules.Scheduler:
    return request.app.state.scheduler  # type: ignore[no-any-return]


@router.post("", response_model=ScheduleRead, status_code=201, openapi_extra=body_class("small"))
def create_schedule(body: ScheduleCreate, session: SessionDep, request: Request, settings: SettingsDep) -> ScheduleRead:
    """Store a schedule and start timing it; its timing and run settings are checked as POST /v1/runs checks them.

    At most COORD_MAX_SCHEDULES schedules (409 past it), none firing more often than every
    COORD_SCHEDULE_MIN_INTERVAL_S seconds, and no cron that never fires (422).
    """
    schedules.check_timing(cron=body.cron, interval_seconds=body.interval_seconds,
                           min_interval_s=settings.schedule_min_interval_s)
    resolve_run(config=body.config, preset=body.preset, rounds=body.rounds, seed=body.seed)
    runs.run_parties(session=session, party_ids=body.party_ids, min_parties=body.min_parties)
    # Only what the caller set is stored: a firing resolves the preset then, as a POST /v1/runs would.
    run_settings = body.model_dump(mode="json", exclude_unset=True, include=RUN_FIELDS)
    row = schedules.create(session=session, cron=body.cron, interval_seconds=body.interval_seconds,
                           run_settings=run_settings, max_schedules=settings.max_schedules,
                           min_interval_s=settings.schedule_min_interval_s)
    scheduler = _scheduler(request)
    scheduler.add(row)
    return _read(row, scheduler)


@router.get("", response_model=list[ScheduleRead])
def list_schedules(session: SessionDep, request: Request) -> list[ScheduleRead]:
    """Every schedule with its firing record, oldest first."""
    scheduler = _scheduler(request)
    return [_read(row, scheduler) for row in schedules.list_schedules(session=session)]


@router.delete("/{schedule_id}", status_code=204)
def delete_schedule(schedule_id: NamePath, session: SessionDep, request: Request) -> Response:
    """Delete a schedule; it fires no more (the runs it started are kept)."""
    schedules.delete(session=session, schedule_id=schedule_id)
    _scheduler(request).remove(schedule_id)
    return Response(status_code=204)
