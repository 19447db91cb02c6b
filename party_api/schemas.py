"""Resource schemas of the party API (request and response bodies)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from services.protocol.ids import EXTERNAL_ID_MAX, NAME_PATTERN, IdStr, checked_id, text_problem

# Every id goes through the one validation (services.protocol.ids): length, control characters, unicode.
ExternalId = Annotated[StrictStr | StrictInt, AfterValidator(checked_id)]
Timestamp = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]  # stored as a 64-bit integer
MAX_METADATA_DEPTH = 32


def _finite_json(value: Any, depth: int = 0) -> None:
    """Refuse NaN/Infinity (PostgreSQL's JSON has neither), control characters and bidi overrides in
    strings and keys, and nesting deeper than MAX_METADATA_DEPTH."""
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number (NaN and Infinity are not JSON)")
    texts = [value] if isinstance(value, str) else list(value) if isinstance(value, dict) else []
    for text in texts:  # string values and keys: no NUL, no terminal escapes, no bidi overrides
        reason = text_problem(text)
        if reason is not None:
            raise ValueError(reason)
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _finite_json(child, depth + 1)


def metadata_checked(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Pydantic validator of item metadata."""
    if value is not None:
        _finite_json(value)
    return value


Metadata = Annotated[dict[str, Any] | None, AfterValidator(metadata_checked)]
MAX_JSON_ROWS = 50_000


class InteractionCreate(BaseModel):
    """One interaction; user and item are external ids. An explicit party needs `rating` (on its scale);
    an implicit party (PARTY_FEEDBACK=implicit) takes an optional positive `weight` (default 1)."""

    model_config = ConfigDict(extra="forbid")
    user_id: ExternalId
    item_id: ExternalId
    rating: float | None = Field(None, description="the rating (explicit parties: required, on the party's scale; "
                                                   "implicit parties read it as the weight)")
    weight: float | None = Field(None, description="implicit parties only: the interaction's weight (a count, "
                                                   "plays, ...), positive and finite; default 1")
    timestamp: Timestamp | None = None


class InteractionBatchCreate(BaseModel):
    """A JSON batch of ratings (or, at an implicit party, interactions), stored atomically."""

    model_config = ConfigDict(extra="forbid")
    rows: list[InteractionCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class SocialLinkCreate(BaseModel):
    """A directed link between two users with a non-negative weight."""

    model_config = ConfigDict(extra="forbid")
    src_user_id: ExternalId
    dst_user_id: ExternalId
    weight: float = 1.0


class SocialLinkBatchCreate(BaseModel):
    """A JSON batch of social links, stored atomically."""

    model_config = ConfigDict(extra="forbid")
    rows: list[SocialLinkCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class ItemCreate(BaseModel):
    """An item of the catalogue with optional metadata (title, genres, ...)."""

    model_config = ConfigDict(extra="forbid")
    external_id: ExternalId
    metadata: Metadata = None


class ItemBatchCreate(BaseModel):
    """A JSON batch of items."""

    model_config = ConfigDict(extra="forbid")
    rows: list[ItemCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class IngestRead(BaseModel):
    """What a committed ingestion request stored."""

    kind: str
    rows: int
    users: int
    items: int
    seconds: float


class ItemsRead(BaseModel):
    """How many items were created or updated."""

    rows: int


class CountsRead(BaseModel):
    """Row counts of the party's tables."""

    users: int
    items: int
    interactions: int
    social_links: int


class SummaryRead(BaseModel):
    """Counts, rating histogram (rating → count) and rating scale."""

    party_id: str
    role: str
    counts: CountsRead
    rating_min: float
    rating_max: float
    rating_histogram: dict[str, int]


def _customer_id(value: Any) -> str:
    """A user id as a string or an integer (not a float or a bool), then the one id validation."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("a user id must be a string or an integer")  # noqa: TRY004 (pydantic reports ValueError only)
    return str(checked_id(str(value)))


# One validator (not a StrictStr | StrictInt union) so an error's location is the list row, not a union member.
CustomerId = Annotated[
    Any,
    AfterValidator(_customer_id),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1, "maxLength": EXTERNAL_ID_MAX},
                              {"type": "integer"}]}),
]


class UserBatchCreate(BaseModel):
    """Customer ids to register at this party (with or without interactions); known ids are left as they are."""

    model_config = ConfigDict(extra="forbid")
    user_ids: list[CustomerId] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class UsersRegistered(BaseModel):
    """What a registration did: distinct ids in the request, how many were new, how many already known."""

    users: int
    created: int
    existing: int


class UserRead(BaseModel):
    """What the party holds about one user (counts only)."""

    external_id: str
    interactions: int
    social_links: int


class ErasureRead(BaseModel):
    """What an erasure removed."""

    external_id: str
    interactions_deleted: int
    social_links_deleted: int
    artifacts_rewritten: list[str] = Field(description="stored artifacts the user was cut out of (name@version)")
    runs_reset: list[str] = Field(description="runs whose alignment or private user rows held the user; their next "
                                  "round runs without them")


class HealthRead(BaseModel):
    """Liveness / readiness status."""

    status: str
    party_id: str
    detail: str | None = None


# ---- federation (coordinator credential) and evaluation labels (admin) ----------------------
class PreflightResponse(BaseModel):
    """What a coordinator checks before a run: who answers, which protocol version, whether it holds data."""

    party_id: str
    protocol_version: str
    holds_data: bool = Field(description="the party has at least one user with an interaction")
    protocols: list[str] = Field(description="the federation protocols this party's build can run")


class PsiFinishResponse(BaseModel):
    """Size of the aligned user set."""

    n_users: int


class PublishRequest(BaseModel):
    """Publish the latest completed model for serving."""

    model_config = ConfigDict(extra="forbid")
    round_index: int = Field(ge=0)
    release_id: str | None = Field(None, pattern=NAME_PATTERN,
                                   description="stage the model under this coordinator release (served once "
                                               "activated); unset: serve it at once")


class KeepBestRequest(BaseModel):
    """Keep the model of the round just finished: the run's best validation round so far."""

    model_config = ConfigDict(extra="forbid")
    round_index: int = Field(ge=0)


class SliceValue(BaseModel):
    """One slice of a party's users in the value report: validation NDCG@10 alone, federated and served."""

    slice: str = Field(description="all, aligned_warm, aligned_cold, private_warm or private_cold (cold: ≤ 2 items "
                                   "of history; private: users outside the intersection)")
    users: int = Field(description="validation users of the slice with a relevant item (slices under 10 are left out)")
    local_ndcg10: float = Field(description="the party alone: its own EASE")
    federated_ndcg10: float = Field(description="the federated model alone")
    served_ndcg10: float = Field(description="what the party serves: the per-slice blend of the two")


class PublishResponse(BaseModel):
    """Version of the stored serving model, and what the party gains on its validation split (value report)."""

    version: int
    value: list[SliceValue] = Field(default_factory=list,
                                    description="per slice of the party's users; empty when the protocol has no local "
                                                "ranking or the party too few validation users")
    valid_sse: float | None = Field(None, description="squared error of the stored model's served ratings on "
                                    "this party's validation split (with its rating component)")
    valid_count: int | None = Field(None, description="validation ratings `valid_sse` covers")
    withheld: str | None = Field(None, description="why `value`, `valid_sse` and `valid_count` are left out (a run "
                                 "with dp_epsilon: they come from held-out ratings outside its DP accounting); "
                                 "None: the party answered them")


class SplitRow(BaseModel):
    """A held-out rating: (user, item) scored on `split` instead of trained on."""

    model_config = ConfigDict(extra="forbid")
    user_id: IdStr
    item_id: IdStr
    split: Literal["train", "valid", "test"]


class SplitRequest(BaseModel):
    """Evaluation labels (replace earlier labels; unlabelled ratings are training ratings)."""

    model_config = ConfigDict(extra="forbid")
    rows: list[SplitRow] = Field(max_length=5_000_000)
    unheld: Literal["refuse", "skip"] = Field(
        default="refuse", description="pairs this party does not store: `refuse` answers 422 naming how many and "
        "the first, and stores nothing; `skip` labels only the pairs it stores (a test file of every party's "
        "pairs, given to each party of a vertical split)")


class SplitResponse(BaseModel):
    """How many labels are stored."""

    rows: int
    skipped: int = Field(default=0, description="pairs left out because this party does not store them "
                                                "(`unheld: skip`)")


# ---- serving (API key, or the coordinator's fan-out) ----------------------------------------
class PairIn(BaseModel):
    """One (user, item) pair to score."""

    model_config = ConfigDict(extra="forbid")
    user_id: IdStr
    item_id: IdStr


class PredictionRequest(BaseModel):
    """A batch of pairs (items of this party)."""

    model_config = ConfigDict(extra="forbid")
    pairs: list[PairIn] = Field(min_length=1, max_length=10_000)


class PredictionOut(BaseModel):
    """A predicted rating (or ranking score, see `score_kind`); `fallback` is "popularity" for a user the model was
    not trained on."""

    user_id: str
    item_id: str
    rating: float = Field(description="the predicted rating, clipped to the party's scale; at an implicit-feedback "
                                      "party the ranking score s(u, v) instead (score_kind ranking_score)")
    fallback: str | None


class SkippedPair(BaseModel):
    """A pair left out of a `unknown=skip` answer: its row in the request and the id this party does not know."""

    row: int
    field: Literal["user_id", "item_id"]


class PredictionResponse(BaseModel):
    """Predictions in request order (with `unknown=skip`, of the known pairs only)."""

    predictions: list[PredictionOut]
    skipped: list[SkippedPair] = Field(default_factory=list,
                                       description="pairs with an id this party does not know (`unknown=skip` only)")
    release_id: str | None = Field(None, description="the coordinator release answering (null: a model published "
                                                     "without one)")
    score_kind: Literal["rating", "ranking_score"] = Field(
        "rating", description="what `rating` holds: a predicted rating (explicit feedback), or the ranking score "
                              "s(u, v) = h_u·h_v + c_v of an implicit-feedback party (unbounded, higher is better, "
                              "not a rating)")


class RecommendedItem(BaseModel):
    """An item and its score: the calibrated log-odds of the served blend (federated + the party's local EASE), the
    ranking score of a model published without a local ranking, or the rating count for the popularity fallback."""

    item_id: str
    score: float


class RecommendationResponse(BaseModel):
    """Top-K of this party's catalogue that the user has not rated."""

    user_id: str
    items: list[RecommendedItem]
    fallback: str | None = Field(description='null: the model ranked; "local": the party\'s own EASE alone (a user '
                                             'the federated model has no row for); "popularity": most rated items')
    model_version: int
    run_id: str
    release_id: str | None = Field(description="the coordinator release answering (null: a model published without one)")


class ReleasesPrune(BaseModel):
    """The coordinator's releases to keep; every other release staged here is deleted (never the active one)."""

    model_config = ConfigDict(extra="forbid")

    keep: list[Annotated[str, StringConstraints(pattern=NAME_PATTERN)]] = Field(max_length=1000)


class ReleasesPruned(BaseModel):
    """What a prune deleted: the releases' serving models and their runs' snapshots and alignments."""

    pruned: list[str]
    runs: list[str]


class ReleaseActivated(BaseModel):
    """The release this party serves from now on and the version of its model."""

    release_id: str
    version: int


def _clean_text(value: str) -> str:
    reason = text_problem(value)
    if reason is not None:
        raise ValueError(reason)
    return value


FeatureName = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_clean_text)]
FeatureText = Annotated[str, StringConstraints(min_length=1, max_length=255), AfterValidator(_clean_text)]


class FeatureValueCreate(BaseModel):
    """One attribute value of a user or item: categorical (`text`) or numeric (`number`), exactly one."""

    model_config = ConfigDict(extra="forbid")
    id: ExternalId
    name: FeatureName
    text: FeatureText | None = None
    number: float | None = Field(None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_value(self) -> FeatureValueCreate:
        """Exactly one of text and number."""
        if (self.text is None) == (self.number is None):
            raise ValueError("give exactly one of text (categorical) and number (numeric)")
        return self


class FeatureBatchCreate(BaseModel):
    """Attribute values that replace every stored value of the users (or items) they name, atomically."""

    model_config = ConfigDict(extra="forbid")
    rows: list[FeatureValueCreate] = Field(min_length=1, max_length=MAX_JSON_ROWS)


class FeaturesRead(BaseModel):
    """What a feature upload stored: the users or items it replaced, the values and their columns."""

    kind: Literal["user", "item"]
    entities: int
    rows: int
    columns: list[str]


class FeatureCountsRead(BaseModel):
    """How many attribute values the party holds, by kind (the values themselves are never served)."""

    user: int
    item: int
