"""The VerFedGNN round, written once: configure → fan out → collect (results, failures) → aggregate.

The coordinator reaches its parties through `PartyLink`s: `InProcessLink` calls a PartyTrainer in
this process, `services.coordinator.client.HttpPartyLink` calls a party service over HTTP. Both
go through `run_round`, so the same seeds give bit-identical runs whichever link carries them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, wait
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from services.errors import ProtocolError
from services.federation.fanout import fan_out
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.types import GradientUpload, RoundMetrics

T = TypeVar("T")
L = TypeVar("L")


class PartyLink(Protocol):
    """One party as the round sees it: domain values in and out (a link does its own encoding)."""

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        ...

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        ...

    def projection(self, *, round_index: int, attempt: int, layer: int) -> np.ndarray:
        """Y_p^k = Φ X_p^k of layer k."""
        ...

    def others(self, *, round_index: int, attempt: int, layer: int, others: np.ndarray) -> None:
        """Take the relayed sum of the other participants' projections of layer k."""
        ...

    def finish(self, *, round_index: int, attempt: int) -> GradientUpload:
        """Private step; protected public gradients and metric sums."""
        ...


@dataclass
class RoundOutcome:
    """What a round attempt produced: metrics when it completed, and who failed at which step."""

    metrics: RoundMetrics | None
    participants: list[str]
    failures: dict[str, str] = field(default_factory=dict)


def run_round(
    *, coord: CoordinatorTrainer, links: Mapping[str, PartyLink], round_index: int, attempt: int = 0,
    min_parties: int | None = None, pool: Executor | None = None,
) -> RoundOutcome:
    """Select → begin → K × (projection, relay, others) → finish → aggregate.

    A party that fails a step is left out of the rest of the round, and the partial-participation
    estimator covers it; when fewer than `min_parties` (None: every selected party) are left, the
    round is abandoned before aggregation and the outcome has no metrics.
    """
    chosen = coord.select_participants(round_index=round_index, available=list(links))
    need = len(chosen) if min_parties is None else min_parties
    failures: dict[str, str] = {}
    alive = {p: links[p] for p in chosen}

    def keep(results: Mapping[str, object], failed: dict[str, str], step: str) -> bool:
        failures.update({p: f"{step}: {why}" for p, why in failed.items()})
        for p in list(alive):
            if p not in results:
                alive.pop(p)
        return len(alive) >= need

    public = coord.public_params()
    res, failed = fan_out(pool, alive, lambda link: link.begin(round_index=round_index, attempt=attempt,
                                                               public=public))
    if not keep(res, failed, "begin"):
        return RoundOutcome(None, sorted(alive), failures)
    for layer in range(coord.public.config.n_layers):
        def projection(link: PartyLink, k: int = layer) -> np.ndarray:
            return link.projection(round_index=round_index, attempt=attempt, layer=k)

        got, failed = fan_out(pool, alive, projection)
        if not keep(got, failed, f"projection[{layer}]"):
            return RoundOutcome(None, sorted(alive), failures)
        relayed = coord.relay(layer=layer, projections=dict(sorted(got.items())))

        def others(link: PartyLink, k: int = layer, down: dict[str, np.ndarray] = relayed) -> None:
            link.others(round_index=round_index, attempt=attempt, layer=k, others=down[link.party_id])

        res, failed = fan_out(pool, alive, others)
        if not keep(res, failed, f"others[{layer}]"):
            return RoundOutcome(None, sorted(alive), failures)
    uploads, failed = fan_out(pool, alive, lambda link: link.finish(round_index=round_index, attempt=attempt))
    if not keep(uploads, failed, "finish"):
        return RoundOutcome(None, sorted(alive), failures)
    good: dict[str, GradientUpload] = dict(sorted(uploads.items()))
    return RoundOutcome(coord.aggregate_and_step(uploads=good), sorted(good), failures)


class InProcessLink:
    """The round sequence's PartyLink over a PartyTrainer in this process (nothing to encode or retry)."""

    def __init__(self, trainer: PartyTrainer) -> None:
        self.trainer = trainer

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.trainer.party_id

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        self.trainer.begin_round(round_index=round_index, public=dict(public))

    def projection(self, *, round_index: int, attempt: int, layer: int) -> np.ndarray:
        """Y_p^k of layer k."""
        return self.trainer.layer_projection(layer=layer)

    def others(self, *, round_index: int, attempt: int, layer: int, others: np.ndarray) -> None:
        """The relayed sum of the other participants' projections."""
        self.trainer.receive_projection_sum(layer=layer, others=others)

    def finish(self, *, round_index: int, attempt: int) -> GradientUpload:
        """Protected gradients and metric sums."""
        return self.trainer.finish_round()


class InProcessFederation:
    """A coordinator and its parties in one process, driven by `run_round` over in-process links."""

    def __init__(self, *, coordinator: CoordinatorTrainer, parties: Mapping[str, PartyTrainer]) -> None:
        self.coordinator = coordinator
        self.parties = dict(sorted(parties.items()))
        self.links: dict[str, PartyLink] = {name: InProcessLink(trainer) for name, trainer in self.parties.items()}

    def run_round(self, round_index: int) -> RoundMetrics:
        """One round with every selected party; a party's failure fails the round (ProtocolError)."""
        outcome = run_round(coord=self.coordinator, links=self.links, round_index=round_index)
        if outcome.metrics is None:
            raise ProtocolError(f"round {round_index} failed: {outcome.failures}")
        return outcome.metrics
