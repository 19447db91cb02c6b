"""Coordinator database tables: party registry, training runs, rounds, public-parameter checkpoints, releases, schedules."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from services.db.base import CoordinatorBase


def utcnow() -> datetime:
    """Timezone-aware now, for column defaults."""
    return datetime.now(UTC)


class PartyRow(CoordinatorBase):
    """A registered party: where to reach it and the credential to present."""

    __tablename__ = "parties"

    party_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(String(512))
    token: Mapped[str] = mapped_column(String(512))
    role: Mapped[str] = mapped_column(String(32), default="ratings")
    enabled: Mapped[bool] = mapped_column(default=True)
    # The name the party's TLS certificate must carry (SAN), checked in every handshake; None: the URL's host.
    tls_name: Mapped[str | None] = mapped_column(String(253), nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class RunRow(CoordinatorBase):
    """A training run and its lifecycle state."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    detail: Mapped[str] = mapped_column(Text, default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    party_ids: Mapped[list[str]] = mapped_column(JSON)
    excluded: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)  # party -> why it was left out
    rounds_total: Mapped[int] = mapped_column(Integer)
    rounds_done: Mapped[int] = mapped_column(Integer, default=0)
    min_parties: Mapped[int] = mapped_column(Integer, default=2)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    n_users: Mapped[int | None] = mapped_column(Integer, nullable=True)
    bytes_sent: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    bytes_received: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # the release a warm run starts from (chosen when the run is created: the active one then); None: cold
    warm_start_from: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # a time bound: past it the run stops after its current round (None: bounded by rounds only)
    max_minutes: Mapped[float | None] = mapped_column(Float, nullable=True)
    # a cancelled or timed-out run publishes its best round as a release (gated) unless this is false
    publish_on_stop: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class RoundRow(CoordinatorBase):
    """One completed round: who took part, who failed, aggregated metrics, traffic."""

    __tablename__ = "rounds"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    round_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    participants: Mapped[list[str]] = mapped_column(JSON)
    failures: Mapped[dict[str, str]] = mapped_column(JSON)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON)
    bytes_sent: Mapped[dict[str, int]] = mapped_column(JSON)
    bytes_received: Mapped[dict[str, int]] = mapped_column(JSON)
    seconds: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CheckpointRow(CoordinatorBase):
    """Public parameters + optimiser state after a completed round (the resume point)."""

    __tablename__ = "checkpoints"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    round_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReleaseRow(CoordinatorBase):
    """The serving model of a completed run: staged at its parties, then active, retired or failed."""

    __tablename__ = "releases"

    release_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, unique=True)  # creation order (release-<seq>)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), unique=True)
    round_index: Mapped[int] = mapped_column(Integer)  # the round whose model the parties stored
    valid_rmse: Mapped[float | None] = mapped_column(Float, nullable=True)  # pooled over the parties
    metrics: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)  # that round's pooled figures
    party_ids: Mapped[list[str]] = mapped_column(JSON)
    staged: Mapped[list[str]] = mapped_column(JSON, default=list)  # parties that stored the model under it
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    warm_start_from: Mapped[str | None] = mapped_column(String(64), nullable=True)  # its run's, if warm
    # party id -> rows of validation NDCG@10 per slice (alone, federated, served), as each party reported at staging
    value_report: Mapped[dict[str, list[dict[str, Any]]] | None] = mapped_column(JSON, nullable=True)
    # party id -> why it withheld its validation figures (a run with dp_epsilon), as it said at staging
    value_withheld: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    activated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    @property
    def valid_ndcg(self) -> float | None:
        """Pooled validation NDCG@10 of the round (metrics' valid_ndcg@10; None when nobody reported one)."""
        value = (self.metrics or {}).get("valid_ndcg@10")
        return None if value is None else float(value)


class ScheduleRow(CoordinatorBase):
    """A schedule that starts runs: a cron expression or an interval, the run settings, and its firing record."""

    __tablename__ = "schedules"

    schedule_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cron: Mapped[str | None] = mapped_column(String(128), nullable=True)  # five fields, UTC
    interval_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    run_settings: Mapped[dict[str, Any]] = mapped_column(JSON)  # the POST /v1/runs body, only what was set
    fire_count: Mapped[int] = mapped_column(Integer, default=0)  # every firing, skipped ones included
    skipped_count: Mapped[int] = mapped_column(Integer, default=0)  # firings while a run was active
    last_fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_outcome: Mapped[str] = mapped_column(Text, default="")
    last_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the run the last start made
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
