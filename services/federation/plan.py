"""What a protocol hands the runtime: its typed config, its coordinator engine and its party side.

The coordinator's runner and the party's federation service know protocols only through a
`ProtocolPlan` from the registry (`services.federation.registry`): they run the set-up every
protocol shares (alignment, configure, key agreement, start), then call the engine's `play` once
per round over `Link`s and answer the party side's steps through its `Handler`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel

from services.federation.aggregation import Aggregation, PartyAggregation
from services.federation.links import Handler, Link

if TYPE_CHECKING:  # the accountant is loaded by the protocols that compute a guarantee
    from services.crypto.interaction_dp import RunGuarantee

SPLIT_CODES = {"train": 0, "valid": 1, "test": 2}  # how a party stores evaluation labels (RatingTable.codes)


@dataclass(frozen=True)
class RoundMetrics:
    """Coordinator-side summary of one round, whatever the protocol (metrics of the model at the round's start)."""

    round_index: int
    participants: list[str]
    loss: float
    rmse: dict[str, float]  # split -> RMSE over participating parties
    mae: dict[str, float]
    per_party: dict[str, dict[str, float]]  # party -> {"train_rmse", "valid_rmse", "test_rmse", "test_mae", ...}
    upload_bytes: int
    upload_nonzeros: int
    ndcg: dict[str, float] = field(default_factory=dict)  # split -> NDCG@10 pooled over the parties (valid)


@dataclass
class RoundOutcome:
    """What a round attempt produced: metrics when it completed, and who failed at which step."""

    metrics: RoundMetrics | None
    participants: list[str]
    failures: dict[str, str] = field(default_factory=dict)
    # the parties the attempt's first summed step was sent to: under masking each of them may now mask that
    # value for this set only, so a retry of the round goes to exactly this set when it can (the runner)
    masked_with: list[str] | None = None


@dataclass(frozen=True)
class StoppingRule:
    """When a run stops early: `patience` rounds without a better validation RMSE, or `rank_patience` rounds
    without a better validation NDCG@10 when no party reports rating errors (None: never early)."""

    patience: int | None
    rank_patience: int | None


@dataclass(frozen=True)
class RatingTable:
    """A party's interactions as the runtime loads them from its database (parallel arrays)."""

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    codes: np.ndarray


@dataclass(frozen=True)
class Seeds:
    """A party's randomness: the seed agreed among the parties (Φ) and its own (initialisation, noise)."""

    projection_seed: int
    local_seed: int


class Engine(Protocol):
    """A protocol's coordinator side for one run."""

    config: Any

    def play(self, *, links: Mapping[str, Link], round_index: int, attempt: int, min_parties: int,
             pool: Executor | None, aggregation: Aggregation) -> RoundOutcome:
        """One round attempt over the links."""
        ...

    def checkpoint(self) -> bytes:
        """Checkpoint (public parameters, optimizer, round) as bytes."""
        ...

    def restore(self, state: bytes) -> None:
        """Restore a checkpoint."""
        ...


class PartySide(Protocol):
    """A protocol's party side for one run: answers steps, checkpoints, yields the serving model."""

    @property
    def handler(self) -> Handler:
        """What answers the round's steps."""
        ...

    def checkpoint(self) -> bytes:
        """Checkpoint of the party's trainer as bytes."""
        ...

    def restore(self, state: bytes) -> None:
        """Restore a checkpoint."""
        ...

    def serving_model(self) -> dict[str, np.ndarray]:
        """Arrays of the serving model (user and item representations, biases)."""
        ...


class RunSettings(Protocol):
    """A run's settings as the coordinator API validated them (a protocol's `run_model`)."""

    @property
    def protocol(self) -> str:
        """The protocol the settings name."""
        ...

    def explicit(self) -> dict[str, Any]:
        """The settings the caller set, as plain values."""
        ...


class ProtocolPlan(Protocol):
    """Everything the runtime needs of a protocol."""

    name: str
    run_model: type[BaseModel]  # the coordinator API's strict settings model (discriminated on `protocol`)
    default_preset: str  # what a run that names no preset starts from
    presets: Mapping[str, Mapping[str, Any]]  # the presets this protocol's runs may name

    def resolve(self, *, explicit: Mapping[str, Any], preset: str) -> tuple[int, dict[str, Any]]:
        """A new run's (rounds cap, settings, `protocol` included): the preset's values, then the caller's."""
        ...

    def stored_settings(self, config: Any) -> dict[str, Any]:
        """Every setting of a typed config as a run stores it (its seed and rounds are the run's own)."""
        ...

    def config(self, raw: Mapping[str, Any], *, seed: int, rounds: int) -> Any:
        """The protocol's typed config from a run's settings (pydantic ValidationError if invalid)."""
        ...

    def load(self, *, config: Any, party_id: str, table: RatingTable, user_order: Sequence[str],
             item_order: Sequence[str], total_items: int, rating_range: tuple[float, float],
             local_seed: int, feedback: Literal["explicit", "implicit"] = "explicit") -> Any:
        """The party's training data for the aligned users, and for its other users where the protocol trains
        them privately (randomized here when the run asks for DP).

        `feedback` is the party's kind: "implicit" rows are interactions whose value is a weight; a
        protocol that cannot train such a party for the run's settings raises PolicyRefused.
        """
        ...

    def announce(self, data: Any) -> tuple[int, float]:
        """What the party tells the coordinator: (training interactions, their rating sum) of the aligned users."""
        ...

    def party(self, *, config: Any, data: Any, seeds: Seeds, item_counts: Mapping[str, int],
              aggregation: PartyAggregation) -> PartySide:
        """The party side for one run."""
        ...

    def engine(self, *, config: Any, n_users: int, item_counts: Mapping[str, int], global_mean: float) -> Engine:
        """The coordinator side for one run."""
        ...

    def with_features(self, data: Any, *, config: Any, user_order: Sequence[str], item_order: Sequence[str],
                      users: Iterable[Any], items: Iterable[Any]) -> Any:
        """`data` with the party's attribute rows attached where the protocol's model takes them (else `data`)."""
        ...

    def fit_rating(self, data: Any, *, base: Callable[[np.ndarray, np.ndarray], np.ndarray], n_users: int,
                   n_items: int, seed: int) -> dict[str, np.ndarray] | None:
        """The party's rating component combined with the federated predictions `base(users, items)`, as arrays
        for the serving model (None: none, or not better than `base` on validation)."""
        ...

    def valid_ratings(self, data: Any, *, n_users: int,
                      n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(users, items, ratings) of the party's validation split in a model of that size (None: none)."""
        ...

    def fit_local(self, data: Any, *, fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> Any | None:
        """The party's local ranking (`models.blend.LocalRanking`) fitted on its own split beside the federated
        scores `fed_rows(rows)`; None where the protocol serves its federated scores alone."""
        ...

    def secure_by_default(self, config: Any) -> bool:
        """Whether the run's sums are masked (the config's secure_aggregation)."""
        ...

    def seed(self, config: Any) -> int:
        """The run's seed inside the config."""
        ...

    def stopping(self, config: Any) -> StoppingRule:
        """The run's early-stopping rule."""
        ...

    def guarantee(self, config: Any) -> RunGuarantee:
        """The whole-run differential-privacy guarantee of the config (ε infinite: none)."""
        ...

    def privacy_record(self, config: Any) -> dict[str, object]:
        """The run's privacy mechanisms and their parameters (as a run status shows them)."""
        ...

    def budget(self, config: Any) -> tuple[float, float] | None:
        """The (ε, δ) budget the run's guarantee must fit (None: no budget set)."""
        ...

    def warm_settings(self, *, previous: Mapping[str, Any], settings: Mapping[str, Any],
                      explicit: AbstractSet[str]) -> dict[str, Any]:
        """A warm run's settings from the previous run's (`explicit`: those its caller set); ValueError saying
        why when this protocol cannot continue that run (another protocol, another architecture)."""
        ...

    def warm_party(self, side: PartySide, *, state: bytes, item_rows: np.ndarray) -> None:
        """Load a previous run's party checkpoint into a new side, items mapped by `item_rows` (-1: new)."""
        ...

    def warm_engine(self, engine: Engine, *, state: bytes, user_rows: np.ndarray) -> None:
        """Load a previous run's engine checkpoint into a new engine, users mapped by `user_rows` (-1: new)."""
        ...


@dataclass(frozen=True)
class RunContract:
    """A run's typed config bound to its protocol's plan: what the runner and the APIs read of a run."""

    plan: ProtocolPlan
    config: Any

    @property
    def protocol(self) -> str:
        """The protocol's registry name."""
        return self.plan.name

    def seed(self) -> int:
        """The run's seed."""
        return self.plan.seed(self.config)

    def stopping(self) -> StoppingRule:
        """The run's early-stopping rule."""
        return self.plan.stopping(self.config)

    def guarantee(self) -> RunGuarantee:
        """The run's whole-run differential-privacy guarantee."""
        return self.plan.guarantee(self.config)

    def privacy_record(self) -> dict[str, object]:
        """The run's privacy mechanisms and their parameters."""
        return self.plan.privacy_record(self.config)

    def dp_epsilon(self) -> float | None:
        """The run's whole-run ε (None: no differential privacy), however its protocol nests the setting."""
        epsilon = self.guarantee().epsilon  # through the plan: a config field read by name misses a nested one
        return epsilon if math.isfinite(epsilon) else None

