"""In-process transport: the coordinator drives PartyTrainer objects by direct calls.

It performs exactly the message sequence of the HTTP transport (same arrays, same order of
calls per party), so a run is bit-identical whichever transport carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.types import RoundMetrics


class InProcessFederation:
    """A coordinator plus its parties in one process."""

    def __init__(self, *, coordinator: CoordinatorTrainer, parties: Mapping[str, PartyTrainer]) -> None:
        self.coordinator = coordinator
        self.parties = dict(sorted(parties.items()))

    def run_round(self, round_index: int) -> RoundMetrics:
        """One VerFedGNN round: select → download → K projection exchanges → upload → aggregate."""
        coord = self.coordinator
        chosen = coord.select_participants(round_index=round_index, available=list(self.parties))
        public = coord.public_params()
        for name in chosen:
            self.parties[name].begin_round(round_index=round_index, public=public)
        for layer in range(coord.public.config.n_layers):
            projections = {name: self.parties[name].layer_projection(layer=layer) for name in chosen}
            relayed = coord.relay(layer=layer, projections=projections)
            for name in chosen:
                self.parties[name].receive_projection_sum(layer=layer, others=relayed[name])
        uploads = {name: self.parties[name].finish_round() for name in chosen}
        return coord.aggregate_and_step(uploads=uploads)
