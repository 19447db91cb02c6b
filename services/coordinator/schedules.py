"""Schedules: runs started by a cron expression or an interval; the table is the truth, APScheduler does the timing.

A firing starts a run through the same function as POST /v1/runs; while a run is active the firing is
skipped, logged, and recorded on the schedule (fire count, skipped count, last outcome).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.db.coordinator_tables import ScheduleRow
from services.errors import Conflict, DomainError, NotFound, ValidationFailed

log = logging.getLogger("fedrec.coordinator")
MAX_INTERVAL_S = 366 * 24 * 3600
CRON_HORIZON_YEARS = 8  # every valid date recurs within 8 years (29 February on a Monday: 28 is the worst)
# Starts a run from a schedule's stored settings and answers its run id (raises as POST /v1/runs does).
Launch = Callable[[Session, dict[str, Any]], str]


def trigger_for(*, cron: str | None, interval_seconds: int | None) -> BaseTrigger:
    """The APScheduler trigger of exactly one of a cron expression (five fields, UTC) or an interval; 422 naming it."""
    if (cron is None) == (interval_seconds is None):
        raise ValidationFailed("set exactly one of cron and interval_seconds", extra={"field": "cron"})
    if interval_seconds is not None:
        if not 1 <= interval_seconds <= MAX_INTERVAL_S:
            raise ValidationFailed(f"interval_seconds must be between 1 and {MAX_INTERVAL_S}",
                                   extra={"field": "interval_seconds"})
        return IntervalTrigger(seconds=interval_seconds, timezone=UTC)
    assert cron is not None
    try:
        return CronTrigger.from_crontab(cron, timezone=UTC)
    except ValueError as exc:
        raise ValidationFailed(f"not a cron expression (minute hour day month weekday): {exc}",
                               extra={"field": "cron"}) from exc


def check_timing(*, cron: str | None, interval_seconds: int | None, min_interval_s: int) -> None:
    """A schedule's trigger must be valid, fire no more often than every `min_interval_s`, and fire at all."""
    trigger = trigger_for(cron=cron, interval_seconds=interval_seconds)
    if interval_seconds is not None and interval_seconds < min_interval_s:
        raise ValidationFailed(f"interval_seconds must be at least {min_interval_s} (COORD_SCHEDULE_MIN_INTERVAL_S)",
                               extra={"field": "interval_seconds"})
    if cron is not None:
        now = datetime.now(UTC)
        # A day that never comes (31 February) is a valid crontab that never fires: refused, not stored.
        first = trigger.get_next_fire_time(None, now)
        if first is None or first.year > now.year + CRON_HORIZON_YEARS:
            raise ValidationFailed(f"cron {cron!r} never fires (no date within {CRON_HORIZON_YEARS} years matches)",
                                   extra={"field": "cron"})


def create(*, session: Session, cron: str | None, interval_seconds: int | None,
           run_settings: dict[str, Any], max_schedules: int = 50, min_interval_s: int = 60) -> ScheduleRow:
    """Store a schedule whose timing is valid (the caller has checked the run settings); 409 past `max_schedules`."""
    check_timing(cron=cron, interval_seconds=interval_seconds, min_interval_s=min_interval_s)
    count = session.scalar(select(func.count()).select_from(ScheduleRow)) or 0
    if count >= max_schedules:
        raise Conflict(f"{count} schedules exist, the most this coordinator keeps (COORD_MAX_SCHEDULES); "
                       "delete one first", extra={"field": "schedule_id"})
    row = ScheduleRow(schedule_id=uuid.uuid4().hex[:16], cron=cron, interval_seconds=interval_seconds,
                      run_settings=run_settings, fire_count=0, skipped_count=0, last_outcome="")
    session.add(row)
    session.commit()
    return row


def get(*, session: Session, schedule_id: str) -> ScheduleRow:
    """One schedule; 404 if unknown."""
    row = session.get(ScheduleRow, schedule_id)
    if row is None:
        raise NotFound(f"schedule {schedule_id!r} does not exist", extra={"field": "schedule_id"})
    return row


def list_schedules(*, session: Session) -> list[ScheduleRow]:
    """Every schedule, oldest first."""
    return list(session.scalars(select(ScheduleRow).order_by(ScheduleRow.created_at, ScheduleRow.schedule_id)))


def delete(*, session: Session, schedule_id: str) -> None:
    """Remove a schedule (404 if unknown); runs it started are kept."""
    session.delete(get(session=session, schedule_id=schedule_id))
    session.commit()


class Scheduler:
    """The coordinator's timer: one APScheduler job per stored schedule, rebuilt from the table at start."""

    def __init__(self, *, sessions: sessionmaker[Session], launch: Launch) -> None:
        self.sessions = sessions
        self.launch = launch
        self._scheduler = BackgroundScheduler(timezone=UTC)
        # Two schedules firing at once must not both find no active run and both start one.
        self._launching = threading.Lock()

    def start(self) -> None:
        """Add a job for every stored schedule and start timing (firings missed while stopped are not made up)."""
        with self.sessions() as session:
            rows = list_schedules(session=session)
        for row in rows:
            self.add(row)
        self._scheduler.start()

    def shutdown(self) -> None:
        """Stop timing; a firing in progress finishes first."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)

    def add(self, row: ScheduleRow) -> None:
        """Time a stored schedule (its trigger was checked when it was stored)."""
        # One instance at a time, and a late firing is made once: firings never pile up behind each other.
        self._scheduler.add_job(self.fire, trigger_for(cron=row.cron, interval_seconds=row.interval_seconds),
                                args=[row.schedule_id], id=row.schedule_id, replace_existing=True,
                                max_instances=1, coalesce=True, misfire_grace_time=None)

    def remove(self, schedule_id: str) -> None:
        """Stop timing a schedule (nothing if it is not timed)."""
        if self._scheduler.get_job(schedule_id) is not None:
            self._scheduler.remove_job(schedule_id)

    def next_fire_at(self, schedule_id: str) -> datetime | None:
        """When the schedule fires next, None if it is not timed."""
        job = self._scheduler.get_job(schedule_id)
        return None if job is None else job.next_run_time

    def fire(self, schedule_id: str) -> str:
        """Start the schedule's run, or skip it while a run is active; record and log the outcome, and answer it."""
        run_id: str | None = None
        skipped = False
        with self.sessions() as session:
            row = session.get(ScheduleRow, schedule_id)
            if row is None:  # deleted while this firing waited
                return "schedule deleted"
            settings = dict(row.run_settings)
        with self._launching, self.sessions() as session:
            try:
                run_id = self.launch(session, settings)
                outcome = f"started run {run_id}"
            except Conflict as exc:
                skipped = True
                outcome = f"skipped: run {exc.extra.get('run_id', '?')} active"
            except DomainError as exc:
                outcome = f"failed: {exc.detail}"
            except Exception as exc:  # a firing must be recorded whatever went wrong, and never stop the timer
                log.exception("schedule %s: firing failed", schedule_id)
                outcome = f"failed: {type(exc).__name__}: {exc}"
        with self.sessions() as session:
            row = session.get(ScheduleRow, schedule_id)
            if row is None:
                return outcome
            row.fire_count += 1
            row.skipped_count += int(skipped)
            row.last_fired_at = datetime.now(UTC)
            row.last_outcome = outcome[:2000]
            if run_id is not None:
                row.last_run_id = run_id
            session.commit()
        log.log(logging.WARNING if skipped else logging.INFO, "schedule %s fired: %s", schedule_id, outcome)
        return outcome
