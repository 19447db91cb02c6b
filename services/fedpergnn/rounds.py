"""FedPerGNN over the federation runtime: coordinator (public parameters), relay (graph expansion), parties.

A round: begin (public parameters down) → [expansion: every party → relay → every party] →
finish (the forward over the expanded graph, LDP uploads up, a summed step of the run's aggregation strategy) → the coordinator steps
VerFedGNN's `CoordinatorTrainer` (same public parameters, optimizer and weight decay, so the two
protocols differ only in what crosses the wire). The same `play_round` runs over in-process links
and over HTTP; `services.federation.links.RecordingLink` keeps a copy of each message for audits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from services.errors import ProtocolError
from services.federation.aggregation import (
    Aggregation,
    Contribution,
    PartyAggregation,
    PlainSum,
    PlainUpload,
    inputs_digest,
)
from services.federation.fanout import fan_out
from services.federation.links import (
    InProcessLink,
    Link,
    Message,
    MessageLog,
    Record,
    RecordingLink,
    Step,
)
from services.federation.plan import RoundOutcome
from services.fedpergnn.config import FedPerGNNConfig
from services.fedpergnn.messages import ExpansionDownload, ExpansionUpload, LdpUpload
from services.fedpergnn.party import FedPerGNNParty
from services.fedpergnn.relay import Relay
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.rounds import finish_layout, finish_vector, unpack_finish
from services.verfedgnn.types import GradientUpload, MetricSums, PartyData, RoundMetrics

_RELAY_TAG = 7_2023


def to_gradient_upload(upload: LdpUpload, *, n_users: int, grad_scale: float) -> GradientUpload:
    """What the coordinator makes of an LDP upload: full-shape gradients (rows scattered), ÷ grad_scale."""
    inv = np.float32(1.0 / grad_scale)
    dense = {k: v * inv for k, v in upload.shared.items()}
    for name, rows in upload.per_user.items():
        full = np.zeros((n_users,) + rows.shape[1:], dtype=np.float32)
        full[upload.rows] = rows
        dense[name] = full * inv
    return GradientUpload(upload.party_id, upload.round_index, upload.loss, dense=dense, metrics=upload.metrics)


def ldp_tree(upload: LdpUpload) -> Message:
    """An LDP upload as a message tree."""
    return {"party_id": upload.party_id, "round_index": upload.round_index, "loss": float(upload.loss),
            "rows": upload.rows, "per_user": dict(upload.per_user), "shared": dict(upload.shared),
            "metrics": {k: np.asarray([m.sse, m.sae, m.count], np.float64) for k, m in upload.metrics.items()}}


def ldp_from_tree(tree: Message) -> LdpUpload:
    """The LDP upload in a message tree (ProtocolError if malformed)."""
    try:
        metrics = {str(k): MetricSums(float(v[0]), float(v[1]), int(v[2])) for k, v in tree["metrics"].items()}
        return LdpUpload(str(tree["party_id"]), int(tree["round_index"]), float(tree["loss"]),
                         np.asarray(tree["rows"], np.int64), {k: np.asarray(v) for k, v in tree["per_user"].items()},
                         {k: np.asarray(v) for k, v in tree["shared"].items()}, metrics)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ProtocolError(f"malformed LDP upload: {exc!r}") from exc


def _tree(obj: ExpansionUpload | ExpansionDownload) -> Message:
    return asdict(obj)


def _from_tree(kind: type[ExpansionUpload | ExpansionDownload], tree: Message) -> ExpansionUpload | ExpansionDownload:
    try:
        fields: dict[str, Any] = {k: (str(v) if k == "party_id" else int(v) if k == "round_index"
                                      else np.asarray(v)) for k, v in tree.items()}
        return kind(**fields)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed {kind.__name__}: {exc}") from exc


class FedPerGNNHandler:
    """A party's side of the FedPerGNN round (a `Handler`)."""

    def __init__(self, party: FedPerGNNParty, aggregation: PartyAggregation | None = None) -> None:
        self.party = party
        self.aggregation = aggregation or PlainUpload()
        self._public: tuple[int, dict[str, np.ndarray]] | None = None

    def handle(self, step: Step, message: Message) -> Message:
        """Answer one step."""
        if step.name == "expansion_upload":
            return _tree(self.party.expansion_upload(round_index=step.round_index))
        if step.name == "expansion_download":
            down = _from_tree(ExpansionDownload, message)
            assert isinstance(down, ExpansionDownload)
            self.party.receive_expansion(down)
            return {}
        if step.name == "begin":
            public = message.get("public")
            if not isinstance(public, dict):
                raise ProtocolError("begin carries the public parameters", extra={"field": "public"})
            self._public = (step.round_index, public)  # the forward runs at finish, over the expanded graph
            return self.aggregation.open_round(step, [str(p) for p in message.get("participants", [])], ["finish|-1"],
                                               inputs=inputs_digest(message))
        if step.name == "finish":
            if self._public is None or self._public[0] != step.round_index:
                raise ProtocolError("finish before begin", extra={"field": "step"})
            self.party.begin(round_index=step.round_index, public=self._public[1])
            upload = self.party.finish()
            n_users, gs = self.party.data.n_users, self.party.fed_config.train.grad_scale
            layout = finish_layout(self.party.public.arrays())
            return self.aggregation.wrap(step, message, Contribution(
                vector=lambda: finish_vector(to_gradient_upload(upload, n_users=n_users, grad_scale=gs),
                                             grad_scale=gs, layout=layout),
                message=lambda: ldp_tree(upload)))
        if step.name.startswith("consistency:"):
            return self.aggregation.consistency(step, message)
        if step.name.startswith("recovery:"):
            return self.aggregation.recover(step, message)
        raise ProtocolError(f"unknown step {step.name!r}", extra={"field": "step"})


def play_round(*, coord: CoordinatorTrainer, relay: Relay, config: FedPerGNNConfig, links: Mapping[str, Link],
               round_index: int, attempt: int = 0, min_parties: int | None = None, pool: Executor | None = None,
               aggregation: Aggregation | None = None) -> RoundOutcome:
    """begin → [expansion] → finish (forward over the expanded graph, summed) → one optimizer step."""
    agg = aggregation or PlainSum()
    alive = dict(sorted(links.items()))
    need = max(agg.min_participants, len(alive) if min_parties is None else min_parties)
    failures: dict[str, str] = {}

    def keep(answered: Mapping[str, object], failed: Mapping[str, str], label: str) -> bool:
        failures.update({p: f"{label}: {why}" for p, why in failed.items()})
        for p in list(alive):
            if p not in answered:
                alive.pop(p)
        return len(alive) >= need

    public = coord.public_params()
    begin = Step("begin", round_index, attempt)
    opening: Message = {"public": public, "participants": sorted(alive)}
    res, failed = fan_out(pool, alive, lambda link: link.call(begin, opening))
    agg.opened(begin, res, holders=opening["participants"])
    if not keep(res, failed, "begin"):
        return RoundOutcome(None, sorted(alive), failures)
    if round_index % config.expand_every == 0:
        up_step = Step("expansion_upload", round_index, attempt)
        ups, failed = fan_out(pool, alive, lambda link: link.call(up_step, {}))
        if not keep(ups, failed, "expansion_upload"):
            return RoundOutcome(None, sorted(alive), failures)
        parsed = {p: _from_tree(ExpansionUpload, m) for p, m in ups.items()}
        downs = relay.expand(parsed)  # type: ignore[arg-type]
        down_step = Step("expansion_download", round_index, attempt)
        res, failed = fan_out(pool, alive, lambda link: link.call(down_step, _tree(downs[link.party_id])))
        if not keep(res, failed, "expansion_download"):
            return RoundOutcome(None, sorted(alive), failures)
    layout = finish_layout(public)
    n_users, gs = coord.n_users, config.train.grad_scale

    def decode(m: Message) -> np.ndarray:
        return finish_vector(to_gradient_upload(ldp_from_tree(m), n_users=n_users, grad_scale=gs), grad_scale=gs,
                             layout=layout)

    masked_with = sorted(alive)  # the finish is the summed step
    got = agg.collect(links=dict(alive), step=Step("finish", round_index, attempt), pool=pool, decode=decode)
    failures.update(got.failures)
    if got.total is None or len(got.contributors) < need:
        return RoundOutcome(None, got.contributors, failures, masked_with=masked_with)
    grads, loss, metrics = unpack_finish(got.total, layout)
    out = coord.step_with_sums(round_index=round_index, participants=got.contributors, grads=grads, loss=loss,
                               metrics=metrics, upload_bytes=got.upload_bytes)
    return RoundOutcome(out, got.contributors, failures)


@dataclass
class ExchangeLog:
    """FedPerGNN's recorded messages (a runtime `MessageLog`) read back as the protocol's domain objects."""

    log: MessageLog

    def find(self, *, party_id: str, step: str, round_index: int) -> object:
        """Expansion upload/download, public parameters or LDP upload of a party at a round (KeyError if none)."""
        direction = "down" if step in ("expansion_download", "begin") else "up"
        tree = self.log.find(party_id=party_id, step=step, direction=direction, round_index=round_index)
        if step == "expansion_upload":
            return _from_tree(ExpansionUpload, tree)
        if step == "expansion_download":
            return _from_tree(ExpansionDownload, tree)
        if step == "finish":
            return ldp_from_tree(tree)
        return tree


def relay_for(seed: int) -> Relay:
    """The relay of a run (its shuffles seeded from the run seed)."""
    return Relay(rng=np.random.default_rng([seed, _RELAY_TAG]))


class FedPerGNNFederation:
    """Coordinator, relay and parties in one process, played by `play_round` over in-process links."""

    def __init__(self, *, config: FedPerGNNConfig, parties: Mapping[str, PartyData], global_mean: float,
                 keys: Mapping[str, bytes] | None = None) -> None:
        first = next(iter(parties.values()))
        self.config = config
        self.coordinator = CoordinatorTrainer(config=config.train, n_users=first.n_users, global_mean=global_mean,
                                              item_counts={p: d.n_items for p, d in parties.items()})
        self.relay = relay_for(config.train.seed)
        self.parties = {p: FedPerGNNParty(config=config, data=d, seed=config.train.seed,
                                          key=None if keys is None else keys[p]) for p, d in sorted(parties.items())}
        self.links: dict[str, Link] = {p: InProcessLink(p, FedPerGNNHandler(t)) for p, t in self.parties.items()}

    def record(self, *, keep: Callable[[Record], bool] | None = None) -> ExchangeLog:
        """Wrap every link in a RecordingLink; returns the shared log."""
        log = MessageLog(keep=keep) if keep is not None else MessageLog()
        self.links = {p: RecordingLink(link, log) for p, link in self.links.items()}
        return ExchangeLog(log)

    def run_round(self, round_index: int) -> RoundMetrics:
        """One round with every party; a party's error fails the round (ProtocolError)."""
        out = play_round(coord=self.coordinator, relay=self.relay, config=self.config, links=self.links,
                         round_index=round_index)
        if out.metrics is None:
            raise ProtocolError(f"round {round_index} failed: {out.failures}")
        return out.metrics

