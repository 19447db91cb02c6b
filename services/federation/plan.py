"""What a protocol hands the runtime: its typed config, its coordinator engine and its party side.

The coordinator's runner and the party's federation service know protocols only through a
`ProtocolPlan` from the registry (`services.federation.registry`): they run the set-up every
protocol shares (alignment, configure, key agreement, start), then call the engine's `play` once
per round over `Link`s and answer the party side's steps through its `Handler`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from services.federation.aggregation import Aggregation, PartyAggregation
from services.federation.links import Handler, Link


@dataclass
class RoundOutcome:
    """What a round attempt produced: metrics when it completed, and who failed at which step."""

    metrics: Any | None  # the protocol's RoundMetrics
    participants: list[str]
    failures: dict[str, str] = field(default_factory=dict)


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


class ProtocolPlan(Protocol):
    """Everything the runtime needs of a protocol."""

    name: str

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

    def fit_local(self, data: Any, *, fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> Any | None:
        """The party's local ranking (`models.blend.LocalRanking`) fitted on its own split beside the federated
        scores `fed_rows(rows)`; None where the protocol serves its federated scores alone."""
        ...

    def secure_by_default(self, config: Any) -> bool:
        """Whether the run's sums are masked (the config's secure_aggregation)."""
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
