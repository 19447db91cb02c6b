"""VerFedGNN's messages as recorded by the runtime's `RecordingLink` (for privacy audits and attack benchmarks).

`record` wraps every link of an in-process federation (or any dict of links) in a
`services.federation.links.RecordingLink`; `VerFedGNNLog` reads the domain values back out of the
recorded message trees: the public parameters a party downloaded, each projection Y_p^k it
uploaded, the relayed sum it reconstructs from the total, its gradient upload. Nothing in the
round changes: the wrapped link is called with the same messages and its answers are returned as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from services.crypto.participation import participation_scale
from services.federation.links import MessageLog, Record, RecordingLink
from services.verfedgnn.messages import upload_from_tree
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.types import GradientUpload


@dataclass
class VerFedGNNLog:
    """The recorded messages of a VerFedGNN run, read as the round's domain values."""

    log: MessageLog
    item_counts: Mapping[str, int]

    @property
    def records(self) -> list[Record]:
        """Every recorded message, in order."""
        return self.log.records

    def projection(self, *, party_id: str, round_index: int, layer: int) -> np.ndarray:
        """Y_p^k as the party uploaded it (plain aggregation)."""
        return np.asarray(self.log.find(party_id=party_id, step="projection", direction="up",
                                        round_index=round_index, layer=layer)["y"])

    def others(self, *, party_id: str, round_index: int, layer: int) -> np.ndarray:
        """The other participants' projections as the party reconstructs them: (total − own) · scale."""
        down = self.log.find(party_id=party_id, step="total", direction="down", round_index=round_index, layer=layer)
        own = self.projection(party_id=party_id, round_index=round_index, layer=layer)
        others = [str(p) for p in down["participants"] if str(p) != party_id]
        counts = {p: m for p, m in self.item_counts.items() if p != party_id}
        scale = participation_scale(item_counts=counts, participants=others) if others else 0.0
        total = np.asarray(down["total"], np.float64).reshape(own.shape)
        return ((total - own) * scale).astype(np.float32)

    def upload(self, *, party_id: str, round_index: int) -> GradientUpload:
        """The party's gradient upload (plain aggregation)."""
        tree = self.log.find(party_id=party_id, step="finish", direction="up", round_index=round_index)
        return upload_from_tree(tree, round_index=round_index, party_id=party_id)

    def public(self, *, party_id: str, round_index: int) -> dict[str, np.ndarray]:
        """The public parameters the party downloaded."""
        return dict(self.log.find(party_id=party_id, step="begin", direction="down", round_index=round_index)["public"])


def record(federation: InProcessFederation, *, keep: Callable[[Record], bool] | None = None) -> VerFedGNNLog:
    """Wrap every link of an in-process federation in a RecordingLink; returns the shared log."""
    log = MessageLog(keep=keep) if keep is not None else MessageLog()
    federation.links = {name: RecordingLink(link, log) for name, link in federation.links.items()}
    return VerFedGNNLog(log, federation.coordinator.item_counts)
