"""Resource schemas of the coordinator API (request and response bodies)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from services.coordinator.run_config import PresetName, RunConfig, default_settings
from services.protocol.ids import NAME_PATTERN, IdStr

# A credential goes into an HTTP header and a URL into a request line: printable ASCII only, no spaces
# (a token the coordinator could not send would make every call to that party fail as "unavailable").
TOKEN_PATTERN = r"^[\x21-\x7e]+$"
URL_PATTERN = r"^https?://[\x21-\x7e]+$"
MAX_PAIRS = 10_000  # a coordinator prediction batch; each party accepts as many (party_api.schemas)
# A DNS name or an IP address: the SAN a party's TLS certificate must carry.
TLS_NAME = Field(default=None, min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]*$",
                 description="the name (DNS SAN or IP) the party's TLS certificate must carry, checked in every "
                             "handshake before the credential is sent; unset: the URL's host")


def _utc(value: Any) -> Any:
    """SQLite hands back naive datetimes; every stored time is UTC, so say so (RFC 3339 with offset)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_utc)]


class HealthRead(BaseModel):
    """Service status."""

    status: str
    service: str
    protocol_version: str
    detail: str | None = Field(default=None, description="what is not ready (readiness only)")


class PartyCreate(BaseModel):
    """Register a party: its base URL, the bearer credential the coordinator presents, its role."""

    model_config = ConfigDict(extra="forbid")
    party_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    url: str = Field(min_length=8, max_length=512, pattern=URL_PATTERN)
    token: str = Field(min_length=1, max_length=256, pattern=TOKEN_PATTERN)
    role: str = Field(default="ratings", pattern=r"^(ratings|social)$")
    tls_name: str | None = TLS_NAME


class PartyUpdate(BaseModel):
    """Change any of a party's fields."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(default=None, min_length=8, max_length=512, pattern=URL_PATTERN)
    token: str | None = Field(default=None, min_length=1, max_length=256, pattern=TOKEN_PATTERN)
    role: str | None = Field(default=None, pattern=r"^(ratings|social)$")
    enabled: bool | None = None
    tls_name: str | None = TLS_NAME


class PartyRead(BaseModel):
    """A registered party (the credential is never echoed)."""

    party_id: str
    url: str
    role: str
    enabled: bool
    tls_name: str | None = None


class TrainingRunCreate(BaseModel):
    """A run: its preset and settings, how many rounds at most, the min_parties policy, the seed, the parties.

    Strict: numbers must be JSON numbers (no strings, no booleans), floats finite, keys known.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    preset: PresetName | None = Field(
        default=None, description="named settings the run starts from; `config` overrides them one by one. "
        "Default: the protocol's measured best (VerFedGNN: tuned-ranking, the model the demo and "
        "benchmarks/ranking.py measure; FedPerGNN: tuned). `tuned` is the RMSE preset, `verfedgnn-paper` the "
        "paper's setting (the engine's own defaults)")
    config: RunConfig = Field(
        default_factory=default_settings,
        description="the protocol (`protocol`, default verfedgnn) and the settings that override the preset's; "
        "the defaults shown are the default preset's")
    rounds: int | None = Field(
        default=None, ge=1, le=100_000, description="at most this many rounds (default: the preset's cap, 1000 for "
        "tuned-ranking); the run ends earlier after `patience` rounds without a better validation RMSE")
    min_parties: int = Field(default=2, ge=1, le=1000)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    party_ids: list[str] | None = Field(default=None, min_length=1)
    warm_start: bool = Field(
        default=False, description="start from the active release's parameters (users and items new since then get "
        "fresh rows) instead of a fresh initialisation; 409 when no release is active or its architecture differs")
    max_minutes: float | None = Field(
        default=None, gt=0, le=525_600, description="a time bound: past it (counted from the run's creation) the "
        "run stops after its current round and publishes its best round as a release (gated); default: none")
    publish_on_stop: bool = Field(
        default=True, description="a run that is cancelled or reaches `max_minutes` publishes its best validation "
        "round as a release (gated like any other); false: it publishes nothing")


class RunCancel(BaseModel):
    """How a cancelled run ends."""

    model_config = ConfigDict(extra="forbid", strict=True)
    publish: bool | None = Field(
        default=None, description="publish the run's best round as a release (gated) before it ends; default: as "
        "the run was created (`publish_on_stop`, true unless set)")


class RoundRead(BaseModel):
    """A completed round."""

    round_index: int
    participants: list[str]
    failures: dict[str, str]
    metrics: dict[str, float]
    bytes_sent: dict[str, int]
    bytes_received: dict[str, int]
    seconds: float


class PartyCheckRead(BaseModel):
    """One party's pre-flight: whether it can take part in a run, and if not, what to fix."""

    party_id: str
    ok: bool
    reason: str = Field(description="empty when ok; else e.g. unreachable, refused the credential, holds no data")


class TrainingRunRead(BaseModel):
    """A run's status: state, current round, per-round metrics, bytes sent/received per party."""

    run_id: str
    state: str
    detail: str
    rounds_total: int
    rounds_done: int
    current_round: int
    min_parties: int
    seed: int
    party_ids: list[str]
    excluded: dict[str, str] = Field(default_factory=dict,
                                     description="parties the run left out (pre-flight, alignment, set-up) and why")
    n_users: int | None
    warm_start_from: str | None = Field(default=None, description="the release a warm run started from "
                                        "(None: a cold run)")
    max_minutes: float | None = Field(default=None, description="the run's time bound (None: rounds only)")
    publish_on_stop: bool = Field(default=True, description="whether a cancelled or timed-out run publishes its "
                                  "best round")
    config: dict[str, Any] = Field(description="every setting of the run, resolved at creation (preset and "
                                   "overrides; `protocol` included)")
    privacy: dict[str, Any] = Field(description="effective privacy mechanisms and parameters (defaults included)")
    privacy_report: dict[str, Any] = Field(
        description="the mechanisms and the attack F1 measured against the same mechanisms on a reference data set "
                    "(shipped benchmark figures; see `fedrec privacy-report`)")
    bytes_sent: dict[str, int]
    bytes_received: dict[str, int]
    rounds: list[RoundRead]
    created_at: Timestamp
    updated_at: Timestamp


class MergedItem(BaseModel):
    """An item, the party that holds it and its score: the party's served log-odds (or ranking score, or popularity
    count)."""

    party_id: str
    item_id: str
    score: float
    fallback: str | None = Field(description='null: the party\'s model ranked it; "local": its own EASE alone (a user '
                                             'its federated model has no row for); "popularity": most rated items')


class MergedRecommendations(BaseModel):
    """Top-K across every party's catalogue; parties that could not answer are listed."""

    user_id: str
    items: list[MergedItem]
    # party id -> error code, for each enabled party that failed, refused or missed the fan-out deadline
    unavailable: dict[str, str]
    partial: bool = Field(description="true when some enabled party is in `unavailable`: the items are the "
                                      "merge of the parties that answered")
    release_id: str | None = Field(None, description="the active release every merged answer came from (a party "
                                                     "serving another is in `unavailable` as release_mismatch)")


class PairIn(BaseModel):
    """A (user, item) pair and the party whose catalogue holds the item (`party_id` of a merged recommendation)."""

    model_config = ConfigDict(extra="forbid")
    user_id: IdStr
    item_id: IdStr
    party_id: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN,
                          description="the item's party: the pair goes to that party only, so no party "
                                      "sees another's item ids")


class PredictionRequest(BaseModel):
    """A batch of pairs, each with the party that holds its item."""

    model_config = ConfigDict(extra="forbid")
    pairs: list[PairIn] = Field(min_length=1, max_length=MAX_PAIRS)


class MergedPrediction(BaseModel):
    """One pair's predicted rating from its party, or why there is none."""

    user_id: str
    item_id: str
    party_id: str
    status: Literal["ok", "unknown", "unavailable"] = Field(
        description="ok: `rating` holds the prediction; unknown: the party does not know the user or item "
                    "(`reason`: unknown_user or unknown_item); unavailable: the party did not answer or refused "
                    "(`reason`: its error code, party_disabled for a disabled party)")
    rating: float | None
    fallback: str | None = Field(description='"popularity" for a user the party\'s model was not trained on')
    reason: str | None
    score_kind: Literal["rating", "ranking_score"] | None = Field(
        None, description="what `rating` holds (status ok): a predicted rating, or the ranking score s(u, v) of an "
                          "implicit-feedback party (not a rating; PARTY_FEEDBACK=implicit)")


class MergedPredictions(BaseModel):
    """Predictions in request order; parties that could not answer are listed."""

    predictions: list[MergedPrediction]
    unavailable: dict[str, str] = Field(description="party id -> error code, for each party asked that did not answer")
    partial: bool = Field(description="true when some pair's party is in `unavailable`")
    release_id: str | None = Field(None, description="the active release every prediction came from (a party "
                                                     "serving another is in `unavailable` as release_mismatch)")


class PartyErasure(BaseModel):
    """What one party did with an erasure."""

    outcome: Literal["erased", "unknown", "unavailable"] = Field(
        description="erased: the party removed the user; unknown: it holds no such user (nothing to erase); "
                    "unavailable: no answer, a refusal, or a disabled party (`reason`), so it may still hold the user")
    reason: str | None
    interactions_deleted: int | None


class FederatedErasure(BaseModel):
    """Erasure across the federation: the outcome at every registered party."""

    user_id: str
    parties: dict[str, PartyErasure]
    complete: bool = Field(description="true when no party is `unavailable`: none of them holds the user any more; "
                                       "false: send the same request again once those parties are back")


class SliceValueRead(BaseModel):
    """One slice of a party's users: validation NDCG@10 alone, federated and served."""

    slice: str
    users: int
    local_ndcg10: float
    federated_ndcg10: float
    served_ndcg10: float


class ReleaseRead(BaseModel):
    """A release: the serving model of a completed run, its pooled validation figures and its state."""

    release_id: str
    run_id: str
    round_index: int = Field(description="the round whose model the parties stored")
    valid_rmse: float | None = Field(description="pooled validation RMSE of that round's models as the parties "
                                     "serve them, each with its own rating component (the run's own figure: metrics' "
                                     "valid_rmse_trained); the gate compares it; None when no party reports rating "
                                     "errors")
    valid_ndcg: float | None = Field(None, description="pooled validation NDCG@10 of that round, each party's own "
                                     "catalogue (metrics' valid_ndcg@10; the gate compares it too)")
    metrics: dict[str, float] = Field(description="that round's pooled metrics")
    state: Literal["staged", "active", "retired", "failed", "pruned"]
    reason: str
    party_ids: list[str]
    staged: list[str] = Field(description="parties that stored the model under this release")
    warm_start_from: str | None = Field(default=None, description="the release its run warm-started from "
                                        "(None: a cold run)")
    value_report: dict[str, list[SliceValueRead]] | None = Field(
        default=None, description="what each party gains: per slice of its users, validation NDCG@10 of the party "
                                  "alone (its own EASE), the federated model and what it serves (the blend); each "
                                  "party's own figures, reported when it staged the release (None: none reported)")
    value_withheld: dict[str, str] | None = Field(
        default=None, description="parties that withheld their validation figures (value report, served error "
                                  "sums) and why: under dp_epsilon they are outside the DP accounting (None: none)")
    created_at: Timestamp
    activated_at: Timestamp | None
    updated_at: Timestamp


class ReleaseActivate(BaseModel):
    """Activate a release; `force` overrides the promotion gate (a retired release needs none)."""

    model_config = ConfigDict(extra="forbid")
    force: bool = False


class ScheduleCreate(TrainingRunCreate):
    """A schedule: exactly one of a cron expression (UTC) or an interval, and the settings of the runs it starts.

    The run settings are the fields of POST /v1/runs, checked as strictly when the schedule is created.
    """

    cron: str | None = Field(default=None, min_length=1, max_length=128,
                             description="five-field crontab expression (minute hour day month weekday), in UTC")
    interval_seconds: int | None = Field(default=None, ge=1, le=366 * 24 * 3600,
                                         description="fire every this many seconds (instead of `cron`)")


class ScheduleRead(BaseModel):
    """A schedule, the run settings it starts runs with, and its firing record."""

    schedule_id: str
    cron: str | None
    interval_seconds: int | None
    run_settings: dict[str, Any] = Field(description="the POST /v1/runs fields it sets")
    fire_count: int = Field(description="firings so far, skipped ones included")
    skipped_count: int = Field(description="firings skipped because a run was active")
    last_fired_at: Timestamp | None
    last_outcome: str = Field(description="`started run <id>`, `skipped: run <id> active` or `failed: <reason>`")
    last_run_id: str | None = Field(description="the run the last started firing made")
    next_fire_at: Timestamp | None = Field(description="when it fires next (None while the scheduler is stopped)")
    created_at: Timestamp
