"""FedPerGNN rounds in one process: coordinator (public parameters), relay (graph expansion), parties.

A round: [expansion: every party → relay → every party] → begin (public parameters down) →
finish (LDP uploads up) → the coordinator aggregates with VerFedGNN's `CoordinatorTrainer`
(same public parameters, optimizer and weight decay, so the two protocols differ only in what
crosses the wire). Links carry the messages; `RecordingLink` keeps a copy of each for audits.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from services.errors import ProtocolError
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.messages import ExpansionDownload, ExpansionUpload, LdpUpload
from services.fedpergnn.party import FedPerGNNParty
from services.fedpergnn.relay import Relay
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.types import GradientUpload, PartyData, RoundMetrics

_RELAY_TAG = 7_2023


class FedPerGNNLink(Protocol):
    """One party as the FedPerGNN round sees it."""

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        ...

    def expansion_upload(self, *, round_index: int) -> ExpansionUpload:
        """The party's items and edges for the relay."""
        ...

    def expansion_download(self, *, download: ExpansionDownload) -> None:
        """The other parties' rows from the relay."""
        ...

    def begin(self, *, round_index: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        ...

    def finish(self, *, round_index: int) -> LdpUpload:
        """Private step; protected public gradients and metric sums."""
        ...


class InProcessLink:
    """FedPerGNNLink over a FedPerGNNParty in this process."""

    def __init__(self, party: FedPerGNNParty) -> None:
        self.party = party

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.party.party_id

    def expansion_upload(self, *, round_index: int) -> ExpansionUpload:
        """The party's items and edges for the relay."""
        return self.party.expansion_upload(round_index=round_index)

    def expansion_download(self, *, download: ExpansionDownload) -> None:
        """The other parties' rows from the relay."""
        self.party.receive_expansion(download)

    def begin(self, *, round_index: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        self.party.begin(round_index=round_index, public=dict(public))

    def finish(self, *, round_index: int) -> LdpUpload:
        """Private step; protected public gradients and metric sums."""
        return self.party.finish()


@dataclass(frozen=True)
class Exchange:
    """One recorded FedPerGNN message (`up`: party → relay or coordinator)."""

    party_id: str
    round_index: int
    step: str  # "expansion_upload" | "expansion_download" | "begin" | "finish"
    direction: str
    payload: object


@dataclass
class ExchangeLog:
    """Recorded messages in order; `keep` decides which are stored."""

    keep: Callable[[Exchange], bool] = field(default=lambda e: True)
    messages: list[Exchange] = field(default_factory=list)

    def find(self, *, party_id: str, step: str, round_index: int) -> object:
        """Payload of a party's message at a step of a round (KeyError if none)."""
        for m in reversed(self.messages):
            if m.party_id == party_id and m.step == step and m.round_index == round_index:
                return m.payload
        raise KeyError(f"no {step} message of {party_id} in round {round_index}")


class RecordingLink:
    """FedPerGNNLink decorator that logs a copy of every message, then forwards it unchanged."""

    def __init__(self, inner: FedPerGNNLink, log: ExchangeLog) -> None:
        self.inner, self.log = inner, log

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.inner.party_id

    def _add(self, round_index: int, step: str, direction: str, payload: object) -> None:
        message = Exchange(self.party_id, round_index, step, direction, payload)
        if self.log.keep(message):
            self.log.messages.append(Exchange(self.party_id, round_index, step, direction, copy.deepcopy(payload)))

    def expansion_upload(self, *, round_index: int) -> ExpansionUpload:
        """Forward, then log the upload to the relay."""
        out = self.inner.expansion_upload(round_index=round_index)
        self._add(round_index, "expansion_upload", "up", out)
        return out

    def expansion_download(self, *, download: ExpansionDownload) -> None:
        """Log the relay's download, then forward."""
        self._add(download.round_index, "expansion_download", "down", download)
        self.inner.expansion_download(download=download)

    def begin(self, *, round_index: int, public: Mapping[str, np.ndarray]) -> None:
        """Log the public parameters, then forward."""
        self._add(round_index, "begin", "down", dict(public))
        self.inner.begin(round_index=round_index, public=public)

    def finish(self, *, round_index: int) -> LdpUpload:
        """Forward, then log the gradient upload."""
        out = self.inner.finish(round_index=round_index)
        self._add(round_index, "finish", "up", out)
        return out


def to_gradient_upload(upload: LdpUpload, *, n_users: int, grad_scale: float) -> GradientUpload:
    """What the coordinator makes of an LDP upload: full-shape gradients (rows scattered), ÷ grad_scale."""
    inv = np.float32(1.0 / grad_scale)
    dense = {k: v * inv for k, v in upload.shared.items()}
    for name, rows in upload.per_user.items():
        full = np.zeros((n_users,) + rows.shape[1:], dtype=np.float32)
        full[upload.rows] = rows
        dense[name] = full * inv
    return GradientUpload(upload.party_id, upload.round_index, upload.loss, dense=dense, metrics=upload.metrics)


class FedPerGNNFederation:
    """Coordinator, relay and parties in one process."""

    def __init__(self, *, config: FedPerGNNConfig, parties: Mapping[str, PartyData], global_mean: float,
                 keys: Mapping[str, bytes] | None = None) -> None:
        first = next(iter(parties.values()))
        self.config = config
        self.coordinator = CoordinatorTrainer(config=config.train, n_users=first.n_users, global_mean=global_mean,
                                              item_counts={p: d.n_items for p, d in parties.items()})
        self.relay = Relay(rng=np.random.default_rng([config.train.seed, _RELAY_TAG]))
        self.parties = {p: FedPerGNNParty(config=config, data=d, seed=config.train.seed,
                                          key=None if keys is None else keys[p]) for p, d in sorted(parties.items())}
        self.links: dict[str, FedPerGNNLink] = {p: InProcessLink(t) for p, t in self.parties.items()}

    def record(self, *, keep: Callable[[Exchange], bool] | None = None) -> ExchangeLog:
        """Wrap every link in a RecordingLink; returns the shared log."""
        log = ExchangeLog(keep=keep) if keep is not None else ExchangeLog()
        self.links = {p: RecordingLink(link, log) for p, link in self.links.items()}
        return log

    def run_round(self, round_index: int) -> RoundMetrics:
        """[expansion] → begin → finish → aggregate; a party's error fails the round (ProtocolError)."""
        try:
            if round_index % self.config.expand_every == 0:
                ups = {p: link.expansion_upload(round_index=round_index) for p, link in self.links.items()}
                for p, down in self.relay.expand(ups).items():
                    self.links[p].expansion_download(download=down)
            public = self.coordinator.public_params()
            for link in self.links.values():
                link.begin(round_index=round_index, public=public)
            uploads = {p: link.finish(round_index=round_index) for p, link in self.links.items()}
        except (ValueError, ProtocolError) as exc:
            raise ProtocolError(f"round {round_index} failed: {exc}") from exc
        n_users, gs = self.coordinator.n_users, self.config.train.grad_scale
        return self.coordinator.aggregate_and_step(
            uploads={p: to_gradient_upload(u, n_users=n_users, grad_scale=gs) for p, u in uploads.items()})
