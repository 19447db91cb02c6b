"""The VerFedGNN round, written once: configure → fan out → collect (results, failures) → aggregate.

Steps (each a `services.federation.links.Step` carried by any `Link`): begin (public parameters
down) → for each layer k: projection (Y_p^k, a summed step) → total (Σ_{p∈A} Y_p^k down to every
participant; each subtracts its own and applies the participation scale) → finish (gradients,
loss and metric sums, a summed step). How a summed step crosses the wire is the run's aggregation
strategy (`services.federation.aggregation`: plain or masked): the sequence below is the same for
both, and the same seeds give bit-identical runs whichever link carries them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

from services.crypto.participation import participation_scale
from services.errors import ProtocolError, ValidationFailed
from services.federation.aggregation import (
    Aggregation,
    Contribution,
    PartyAggregation,
    PlainSum,
    PlainUpload,
    inputs_digest,
)
from services.federation.fanout import fan_out
from services.federation.links import InProcessLink, Link, Message, Step
from services.federation.plan import RoundOutcome
from services.verfedgnn.coordinator import CoordinatorTrainer, upload_gradients
from services.verfedgnn.messages import upload_from_tree, upload_tree
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.types import SPLITS, GradientUpload, MetricSums, RoundMetrics

Layout = Sequence[tuple[str, tuple[int, ...]]]


def finish_layout(arrays: Mapping[str, np.ndarray]) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the public gradients in the finish vector (sorted by name)."""
    return [(k, tuple(arrays[k].shape)) for k in sorted(arrays)]


def finish_size(layout: Layout) -> int:
    """Length of the finish vector: gradients, the loss, (sse, sae, count) per split, then the validation
    ranking sums (Σ NDCG@10, users)."""
    return sum(int(np.prod(s)) for _, s in layout) + 1 + 3 * len(SPLITS) + 2


def finish_vector(upload: GradientUpload, *, grad_scale: float, layout: Layout) -> np.ndarray:
    """One party's upload as the flat vector the round sums: decoded gradients, loss, metric sums."""
    grads = upload_gradients(upload, grad_scale=grad_scale)
    parts = []
    for name, shape in layout:
        g = grads.get(name)
        if g is None or tuple(g.shape) != tuple(shape):
            raise ProtocolError(f"party {upload.party_id}: gradient {name} missing or not of shape {shape}")
        parts.append(np.asarray(g, np.float64).ravel())
    parts.append(np.array([upload.loss], np.float64))
    for s in SPLITS:
        m = upload.metrics.get(s, MetricSums())
        parts.append(np.array([m.sse, m.sae, m.count], np.float64))
    v = upload.metrics.get("valid", MetricSums())
    parts.append(np.array([v.ndcg, v.ranked], np.float64))
    return np.concatenate(parts)


def unpack_finish(values: np.ndarray, layout: Layout) -> tuple[dict[str, np.ndarray], float, dict[str, MetricSums]]:
    """A (summed) finish vector → gradients by name, loss, metric sums by split."""
    if values.size != finish_size(layout):
        raise ProtocolError(f"finish vector has {values.size} values, expected {finish_size(layout)}")
    grads, at = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        grads[name] = values[at:at + n].reshape(shape)
        at += n
    loss = float(values[at])
    tail = values[at + 1:at + 1 + 3 * len(SPLITS)].reshape(len(SPLITS), 3)
    ndcg, ranked = values[-2:]
    metrics = {s: MetricSums(float(tail[j, 0]), float(tail[j, 1]), round(tail[j, 2]),
                             *((float(ndcg), round(ranked)) if s == "valid" else ()))
               for j, s in enumerate(SPLITS)}
    return grads, loss, metrics


def _participants(message: Message) -> list[str]:
    try:
        return [str(p) for p in list(message["participants"])]
    except (KeyError, TypeError) as exc:
        raise ProtocolError("the step names its participants", extra={"field": "participants"}) from exc


class VerFedGNNParty:
    """A party's side of the round (a `Handler`): a PartyTrainer behind the run's aggregation strategy."""

    def __init__(self, *, trainer: PartyTrainer, item_counts: Mapping[str, int],
                 aggregation: PartyAggregation | None = None) -> None:
        self.trainer = trainer
        self.item_counts = {str(k): int(v) for k, v in item_counts.items()}
        self.aggregation = aggregation or PlainUpload()
        self._own: dict[int, np.ndarray] = {}

    @property
    def party_id(self) -> str:
        """Id of this party."""
        return self.trainer.party_id

    def handle(self, step: Step, message: Message) -> Message:
        """Answer one step of the round."""
        if step.name == "begin":
            self._own = {}
            self.trainer.begin_round(round_index=step.round_index, public=self._public(message))
            labels = [f"projection|{k}" for k in range(self.trainer.public.config.n_layers)] + ["finish|-1"]
            return self.aggregation.open_round(step, _participants(message), labels, inputs=inputs_digest(message))
        if step.name == "projection":
            return self.aggregation.wrap(step, message, self._projection(step.layer))
        if step.name == "total":
            self._total(step, message)
            return {}
        if step.name == "finish":
            return self.aggregation.wrap(step, message, self._finish())
        if step.name.startswith("consistency:"):
            return self.aggregation.consistency(step, message)
        if step.name.startswith("recovery:"):
            return self.aggregation.recover(step, message)
        raise ProtocolError(f"unknown step {step.name!r}", extra={"field": "step"})

    def _public(self, message: Message) -> dict[str, np.ndarray]:
        """Public parameters must have exactly the model's names, shapes and float32 dtype (422 if not)."""
        public = message.get("public")
        expected = self.trainer.public.arrays()
        if not isinstance(public, dict) or set(public) != set(expected):
            raise ValidationFailed("public parameters must be exactly " + ", ".join(sorted(expected)),
                                   extra={"field": "public"})
        for name, arr in public.items():
            if not isinstance(arr, np.ndarray) or arr.shape != expected[name].shape or arr.dtype != np.float32:
                raise ValidationFailed(f"public parameter {name} must be float32 {expected[name].shape}",
                                       extra={"field": name})
        return public

    def _projection(self, layer: int) -> Contribution:
        own = self._own.get(layer)
        if own is None:
            own = self._own[layer] = self.trainer.layer_projection(layer=layer)
        y = own
        return Contribution(vector=lambda: np.asarray(y, np.float64).ravel(), message=lambda: {"y": y})

    def _total(self, step: Step, message: Message) -> None:
        """others = (Σ_{p∈A} Y_p^k − own) · scale, the participation estimate of the other parties' sum."""
        layer = step.layer
        own = self._own.get(layer)
        if own is None:
            raise ProtocolError(f"layer {layer}: no projection was sent", extra={"field": "layer"})
        try:
            total = np.asarray(message["total"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError("total carries the sum of the projections", extra={"field": "total"}) from exc
        if total.size != own.size or not np.isfinite(total).all():
            raise ProtocolError(f"layer {layer}: total must be {own.size} finite values", extra={"field": "total"})
        names = _participants(message)
        unknown = [p for p in names if p not in self.item_counts]
        if self.party_id not in names or unknown:
            raise ProtocolError(f"bad participants {names}", extra={"field": "participants"})
        self.aggregation.check_summed(Step("projection", step.round_index, step.attempt, layer), names)
        others = [p for p in names if p != self.party_id]
        if others:
            counts = {p: m for p, m in self.item_counts.items() if p != self.party_id}
            scale = participation_scale(item_counts=counts, participants=others)
            down = ((total.reshape(own.shape) - own) * scale).astype(np.float32)
        else:
            down = np.zeros_like(own, dtype=np.float32)
        self.trainer.receive_projection_sum(layer=layer, others=down)

    def _finish(self) -> Contribution:
        upload = self.trainer.finish_round()
        layout = finish_layout(self.trainer.public.arrays())
        scale = self.trainer.config.grad_scale
        return Contribution(vector=lambda: finish_vector(upload, grad_scale=scale, layout=layout),
                            message=lambda: upload_tree(upload))


def run_round(
    *, coord: CoordinatorTrainer, links: Mapping[str, Link], round_index: int, attempt: int = 0,
    min_parties: int | None = None, pool: Executor | None = None, aggregation: Aggregation | None = None,
) -> RoundOutcome:
    """Select → begin → K × (projection sum, total) → finish sum → one optimizer step.

    A party that fails a step is left out of the rest of the round (a masked sum recovers it, the
    partial-participation estimator covers it); below max(min_parties, the strategy's minimum)
    parties (min_parties None: every selected party) the attempt is abandoned and has no metrics.
    """
    agg = aggregation or PlainSum()
    chosen = coord.select_participants(round_index=round_index, available=list(links))
    need = max(agg.min_participants, len(chosen) if min_parties is None else min_parties)
    failures: dict[str, str] = {}
    alive: dict[str, Link] = {p: links[p] for p in chosen}
    sent = 0

    def keep(answered: Sequence[str], failed: Mapping[str, str]) -> bool:
        failures.update(failed)
        for p in list(alive):
            if p not in answered:
                alive.pop(p)
        return len(alive) >= need

    first: list[list[str]] = []  # the set of the first summed step, once sent

    def abandoned() -> RoundOutcome:
        return RoundOutcome(None, sorted(alive), failures, masked_with=first[0] if first else None)

    def summed(name: str, layer: int, decode: Any) -> np.ndarray | None:
        nonlocal sent
        if not first:
            first.append(sorted(alive))
        got = agg.collect(links=dict(alive), step=Step(name, round_index, attempt, layer), pool=pool, decode=decode)
        sent += got.upload_bytes
        ok = keep(got.contributors, got.failures)
        return got.total if ok and got.total is not None else None

    public = coord.public_params()
    begin = Step("begin", round_index, attempt)
    opening: Message = {"public": public, "participants": sorted(alive)}
    res, failed = fan_out(pool, alive, lambda link: link.call(begin, opening))
    agg.opened(begin, res, holders=opening["participants"])
    if not keep(list(res), {p: f"begin: {why}" for p, why in failed.items()}):
        return abandoned()
    for layer in range(coord.public.config.n_layers):
        total = summed("projection", layer, lambda m: np.asarray(m["y"], np.float32))
        if total is None:
            return abandoned()
        down: Message = {"total": total, "participants": sorted(alive)}
        step = Step("total", round_index, attempt, layer)

        def total_down(link: Link, s: Step = step, m: Message = down) -> Message:
            return link.call(s, m)

        res, failed = fan_out(pool, alive, total_down)
        if not keep(list(res), {p: f"total[{layer}]: {why}" for p, why in failed.items()}):
            return abandoned()
    layout = finish_layout(public)
    scale = coord.config.grad_scale

    def decode_upload(m: Message) -> np.ndarray:
        return finish_vector(upload_from_tree(m, round_index=round_index), grad_scale=scale, layout=layout)

    values = summed("finish", -1, decode_upload)
    if values is None:
        return abandoned()
    grads, loss, metrics = unpack_finish(values, layout)
    contributors = sorted(alive)
    out = coord.step_with_sums(round_index=round_index, participants=contributors, grads=grads, loss=loss,
                               metrics=metrics, upload_bytes=sent)
    return RoundOutcome(out, contributors, failures)


class InProcessFederation:
    """A coordinator and its parties in one process, driven by `run_round` over in-process links."""

    def __init__(self, *, coordinator: CoordinatorTrainer, parties: Mapping[str, PartyTrainer],
                 aggregations: Mapping[str, PartyAggregation] | None = None,
                 aggregation: Aggregation | None = None) -> None:
        self.coordinator = coordinator
        self.parties = dict(sorted(parties.items()))
        self.aggregation = aggregation or PlainSum()
        counts = coordinator.item_counts
        self.handlers = {name: VerFedGNNParty(trainer=t, item_counts=counts,
                                              aggregation=None if aggregations is None else aggregations[name])
                         for name, t in self.parties.items()}
        self.links: dict[str, Link] = {name: InProcessLink(name, h) for name, h in self.handlers.items()}

    def run_round(self, round_index: int) -> RoundMetrics:
        """One round with every selected party; a party's failure fails the round (ProtocolError)."""
        outcome = run_round(coord=self.coordinator, links=self.links, round_index=round_index,
                            aggregation=self.aggregation)
        if outcome.metrics is None:
            raise ProtocolError(f"round {round_index} failed: {outcome.failures}")
        return outcome.metrics
