"""VerFedGNN with secure aggregation: the coordinator receives masked per-party messages and learns only sums.

Per round: begin → for each layer: masked projection (party → coordinator), total (coordinator →
every party, the same array; each party subtracts its own projection and applies the
participation scale itself) → masked finish (gradients, loss and metric sums as one fixed-point
vector). A party that fails during a masked step is recovered from (the survivors reveal their
masks with it for that step only, `SecAggParty.recovery`); a survivor that fails during recovery
abandons the attempt, and the round is retried with fresh masks. Seeds: the projection Φ comes
from a seed the parties agree on (`SecAggParty.agreed_seed`), each party's item initialisation
and quantization draws from its own secret (`party_seeds`); the coordinator holds neither.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.crypto.participation import participation_scale
from services.crypto.secagg import KeyAnnouncement, SecAggParty, decode_fixed, encode_fixed, step_context
from services.errors import ProtocolError
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer, upload_gradients
from services.verfedgnn.party import PartyTrainer
from services.federation.fanout import fan_out
from services.verfedgnn.rounds import RoundOutcome
from services.verfedgnn.types import SPLITS, MetricSums, PartyData, RoundMetrics

MIN_MASKED = 2  # a masked sum over one party would be that party's value in the clear


def dev_party_secret(party_id: str) -> bytes:
    """A WELL-KNOWN secret for local runs, benchmarks and tests (the in-process reference reproduces it)."""
    return hashlib.sha256(b"fedrec-dev-party-secret|" + party_id.encode()).digest()


@dataclass(frozen=True)
class PartySeeds:
    """Where a party's randomness comes from: Φ from the agreed seed, the rest from its own secret."""

    projection_seed: int  # agreed among the parties; the coordinator cannot compute it
    local_seed: int  # this party's alone: item-embedding initialisation, quantization draws


def party_seeds(secagg: SecAggParty, *, run_seed: int, sealed: Mapping[str, str]) -> PartySeeds:
    """The seeds a party trains with, from the peers' sealed contributions addressed to it."""
    return PartySeeds(secagg.agreed_seed(run_seed, sealed), secagg.derived_seed("local", run_seed))


def seeded_trainer(*, config: TrainConfig, data: PartyData, seeds: PartySeeds) -> PartyTrainer:
    """A PartyTrainer whose Φ and private initialisation the coordinator cannot reproduce."""
    return PartyTrainer(config=config.model_copy(update={"seed": seeds.projection_seed}), data=data,
                        seed=config.seed, local_seed=seeds.local_seed)


def agree_in_process(parties: Mapping[str, SecAggParty], *, run_seed: int) -> dict[str, PartySeeds]:
    """Key agreement and seed agreement among in-process parties (what the coordinator relays over HTTP)."""
    announcements = [p.announce() for p in parties.values()]
    for p in parties.values():
        p.accept(announcements)
    sealed = {pid: p.seal_contribution(run_seed) for pid, p in parties.items()}
    return {pid: party_seeds(p, run_seed=run_seed, sealed={v: sealed[v][pid] for v in sealed if v != pid})
            for pid, p in parties.items()}


def finish_layout(arrays: Mapping[str, np.ndarray]) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the public gradients in the masked finish vector (sorted by name)."""
    return [(k, tuple(arrays[k].shape)) for k in sorted(arrays)]


def finish_size(layout: Sequence[tuple[str, tuple[int, ...]]]) -> int:
    """Length of the masked finish vector: gradients, the loss, (sse, sae, count) per split."""
    return sum(int(np.prod(s)) for _, s in layout) + 1 + 3 * len(SPLITS)


def unpack_finish(values: np.ndarray, layout: Sequence[tuple[str, tuple[int, ...]]]
                  ) -> tuple[dict[str, np.ndarray], float, dict[str, MetricSums]]:
    """A (summed) finish vector → gradients by name, loss, metric sums by split."""
    if values.size != finish_size(layout):
        raise ProtocolError(f"finish vector has {values.size} values, expected {finish_size(layout)}")
    grads, at = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        grads[name] = values[at:at + n].reshape(shape)
        at += n
    loss = float(values[at])
    tail = values[at + 1:].reshape(len(SPLITS), 3)
    metrics = {s: MetricSums(float(tail[j, 0]), float(tail[j, 1]), int(round(tail[j, 2])))
               for j, s in enumerate(SPLITS)}
    return grads, loss, metrics


class SecureParty:
    """Party side of a masked round: a PartyTrainer plus its pairwise keys."""

    def __init__(self, *, trainer: PartyTrainer, secagg: SecAggParty, item_counts: Mapping[str, int]) -> None:
        self.trainer, self.secagg = trainer, secagg
        self.item_counts = {str(k): int(v) for k, v in item_counts.items()}
        self._own: dict[int, np.ndarray] = {}

    @property
    def party_id(self) -> str:
        """Id of this party."""
        return self.trainer.party_id

    def _checked(self, participants: Sequence[str]) -> list[str]:
        names = sorted(set(participants))
        if self.party_id not in names or len(names) < MIN_MASKED:
            raise ProtocolError(f"a masked step needs this party and another participant, got {names}")
        unknown = [p for p in names if p not in self.item_counts]
        if unknown:
            raise ProtocolError(f"unknown participants {unknown}")
        return names

    def begin(self, *, round_index: int, public: dict[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        self._own = {}
        self.trainer.begin_round(round_index=round_index, public=public)

    def masked_projection(self, *, round_index: int, attempt: int, layer: int, participants: Sequence[str]
                          ) -> np.ndarray:
        """Y_p^k in fixed point plus this party's pairwise masks (uint64, flat)."""
        names = self._checked(participants)
        own = self._own.get(layer)
        if own is None:
            own = self._own[layer] = self.trainer.layer_projection(layer=layer)
        ctx = step_context(round_index=round_index, attempt=attempt, step="projection", layer=layer)
        return self.secagg.mask(encode_fixed(own), participants=names, context=ctx)

    def total(self, *, layer: int, total: np.ndarray, participants: Sequence[str]) -> None:
        """Σ_{p∈A} Y_p^k from the coordinator: others = (Σ − own) · scale, as the plain relay computes it."""
        names = self._checked(participants)
        own = self._own.get(layer)
        if own is None:
            raise ProtocolError(f"layer {layer}: no masked projection was sent")
        if total.size != own.size:
            raise ProtocolError(f"layer {layer}: total has {total.size} values, expected {own.size}")
        others = [p for p in names if p != self.party_id]
        counts = {p: m for p, m in self.item_counts.items() if p != self.party_id}
        scale = participation_scale(item_counts=counts, participants=others)
        down = ((np.asarray(total, np.float64).reshape(own.shape) - own) * scale).astype(np.float32)
        self.trainer.receive_projection_sum(layer=layer, others=down)

    def masked_finish(self, *, round_index: int, attempt: int, participants: Sequence[str]) -> np.ndarray:
        """Gradients (as the coordinator decodes them), loss and metric sums, in fixed point plus masks."""
        names = self._checked(participants)
        upload = self.trainer.finish_round()
        grads = upload_gradients(upload, grad_scale=self.trainer.config.grad_scale)
        layout = finish_layout(self.trainer.public.arrays())
        parts = [np.asarray(grads[k], np.float64).ravel() for k, _ in layout]
        parts.append(np.array([upload.loss], np.float64))
        for s in SPLITS:
            m = upload.metrics.get(s, MetricSums())
            parts.append(np.array([m.sse, m.sae, m.count], np.float64))
        ctx = step_context(round_index=round_index, attempt=attempt, step="finish", layer=-1)
        return self.secagg.mask(encode_fixed(np.concatenate(parts)), participants=names, context=ctx)

    def recovery(self, *, round_index: int, attempt: int, step: str, layer: int, dropped: Sequence[str],
                 size: int) -> np.ndarray:
        """This party's masks with parties that dropped out of a step (never its own value)."""
        if step not in ("projection", "finish") or self.party_id in dropped or not dropped:
            raise ProtocolError(f"bad recovery request: step {step}, dropped {list(dropped)}")
        ctx = step_context(round_index=round_index, attempt=attempt, step=step, layer=layer)
        return self.secagg.recovery(dropped=dropped, size=size, context=ctx)


class SecureLink(Protocol):
    """One party as a masked round sees it (InProcessSecureLink, or HttpPartyLink over HTTP)."""

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        ...

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        ...

    def masked_projection(self, *, round_index: int, attempt: int, layer: int, participants: list[str]
                          ) -> np.ndarray:
        """Masked Y_p^k (uint64)."""
        ...

    def total(self, *, round_index: int, attempt: int, layer: int, total: np.ndarray,
              participants: list[str]) -> None:
        """The unmasked sum of the participants' projections."""
        ...

    def masked_finish(self, *, round_index: int, attempt: int, participants: list[str]) -> np.ndarray:
        """Masked gradients, loss and metric sums (uint64)."""
        ...

    def recovery(self, *, round_index: int, attempt: int, step: str, layer: int, dropped: list[str],
                 size: int) -> np.ndarray:
        """The party's step masks with dropped parties (uint64)."""
        ...


class InProcessSecureLink:
    """SecureLink over a SecureParty in this process."""

    def __init__(self, party: SecureParty) -> None:
        self.party = party

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.party.party_id

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Load the round's public parameters."""
        self.party.begin(round_index=round_index, public=dict(public))

    def masked_projection(self, *, round_index: int, attempt: int, layer: int, participants: list[str]
                          ) -> np.ndarray:
        """Masked Y_p^k."""
        return self.party.masked_projection(round_index=round_index, attempt=attempt, layer=layer,
                                            participants=participants)

    def total(self, *, round_index: int, attempt: int, layer: int, total: np.ndarray,
              participants: list[str]) -> None:
        """The unmasked sum."""
        self.party.total(layer=layer, total=total, participants=participants)

    def masked_finish(self, *, round_index: int, attempt: int, participants: list[str]) -> np.ndarray:
        """Masked finish vector."""
        return self.party.masked_finish(round_index=round_index, attempt=attempt, participants=participants)

    def recovery(self, *, round_index: int, attempt: int, step: str, layer: int, dropped: list[str],
                 size: int) -> np.ndarray:
        """Step masks with dropped parties."""
        return self.party.recovery(round_index=round_index, attempt=attempt, step=step, layer=layer,
                                   dropped=dropped, size=size)


def run_secure_round(
    *, coord: CoordinatorTrainer, links: Mapping[str, SecureLink], round_index: int, attempt: int = 0,
    min_parties: int | None = None, pool: Executor | None = None,
) -> RoundOutcome:
    """The VerFedGNN round with every per-party message masked; the coordinator sees sums only.

    Same contract as `rounds.run_round`: a party that fails a step is left out of the rest of the
    round (its masks are recovered from the survivors); below max(min_parties, 2) parties, or when
    a survivor fails during recovery, the attempt is abandoned and the outcome has no metrics.
    """
    chosen = coord.select_participants(round_index=round_index, available=list(links))
    need = max(MIN_MASKED, len(chosen) if min_parties is None else min_parties)
    failures: dict[str, str] = {}
    alive = {p: links[p] for p in chosen}
    sent_bytes = 0

    def keep(results: Mapping[str, object], failed: dict[str, str], step: str) -> bool:
        failures.update({p: f"{step}: {why}" for p, why in failed.items()})
        for p in list(alive):
            if p not in results:
                alive.pop(p)
        return len(alive) >= need

    def masked_sum(step: str, layer: int, call: Callable[[SecureLink, list[str]], np.ndarray]
                   ) -> tuple[np.ndarray, list[str]] | None:
        nonlocal sent_bytes
        names = sorted(alive)
        got, failed = fan_out(pool, alive, lambda link: call(link, names))
        label = step if layer < 0 else f"{step}[{layer}]"
        if not keep(got, failed, label):
            return None
        sizes = {np.asarray(v).size for v in got.values()}
        if len(sizes) != 1:
            raise ProtocolError(f"{label}: masked vectors of different sizes {sizes}")
        size = sizes.pop()
        total = np.zeros(size, dtype=np.uint64)
        for v in got.values():
            total += np.asarray(v, dtype=np.uint64)
            sent_bytes += 8 * size
        dropped = [p for p in names if p not in got]
        if dropped:
            rec, failed = fan_out(pool, alive, lambda link: link.recovery(
                round_index=round_index, attempt=attempt, step=step, layer=layer, dropped=dropped, size=size))
            if failed or not keep(rec, failed, f"recovery of {label}"):
                failures.update({p: f"recovery of {label}: {why}" for p, why in failed.items()})
                alive.clear()  # the sum cannot be unmasked: abandon the attempt (retried with fresh masks)
                return None
            for v in rec.values():
                total -= np.asarray(v, dtype=np.uint64)
        return decode_fixed(total), sorted(got)

    public = coord.public_params()
    res, failed = fan_out(pool, alive, lambda link: link.begin(round_index=round_index, attempt=attempt,
                                                               public=public))
    if not keep(res, failed, "begin"):
        return RoundOutcome(None, sorted(alive), failures)
    for layer in range(coord.public.config.n_layers):
        def projection(link: SecureLink, names: list[str], k: int = layer) -> np.ndarray:
            return link.masked_projection(round_index=round_index, attempt=attempt, layer=k, participants=names)

        summed = masked_sum("projection", layer, projection)
        if summed is None:
            return RoundOutcome(None, sorted(alive), failures)
        total, contributors = summed

        def down(link: SecureLink, k: int = layer, t: np.ndarray = total, names: list[str] = contributors) -> None:
            link.total(round_index=round_index, attempt=attempt, layer=k, total=t, participants=names)

        res, failed = fan_out(pool, alive, down)
        if not keep(res, failed, f"total[{layer}]"):
            return RoundOutcome(None, sorted(alive), failures)

    def finish(link: SecureLink, names: list[str]) -> np.ndarray:
        return link.masked_finish(round_index=round_index, attempt=attempt, participants=names)

    summed = masked_sum("finish", -1, finish)
    if summed is None:
        return RoundOutcome(None, sorted(alive), failures)
    values, contributors = summed
    grads, loss, metrics = unpack_finish(values, finish_layout(coord.public_params()))
    out = coord.step_with_sums(round_index=round_index, participants=contributors, grads=grads, loss=loss,
                               metrics=metrics, upload_bytes=sent_bytes)
    return RoundOutcome(out, contributors, failures)


class SecureInProcessFederation:
    """A coordinator and its parties in one process, every summed message masked (same API as InProcessFederation)."""

    def __init__(self, *, coordinator: CoordinatorTrainer, parties: Mapping[str, PartyTrainer],
                 secagg: Mapping[str, SecAggParty]) -> None:
        self.coordinator = coordinator
        self.parties = dict(sorted(parties.items()))
        counts = coordinator.item_counts
        self.links: dict[str, SecureLink] = {
            name: InProcessSecureLink(SecureParty(trainer=t, secagg=secagg[name], item_counts=counts))
            for name, t in self.parties.items()}

    def run_round(self, round_index: int) -> RoundMetrics:
        """One masked round with every selected party; a failure fails the round (ProtocolError)."""
        outcome = run_secure_round(coord=self.coordinator, links=self.links, round_index=round_index)
        if outcome.metrics is None:
            raise ProtocolError(f"round {round_index} failed: {outcome.failures}")
        return outcome.metrics


def secure_federation(*, config: TrainConfig, datas: Mapping[str, PartyData], coordinator: CoordinatorTrainer,
                      secrets: Mapping[str, bytes], run_id: str) -> SecureInProcessFederation:
    """An in-process masked federation whose seeds are agreed and party-local, as the HTTP parties build it."""
    sec = {p: SecAggParty(party_id=p, secret=secrets[p], run_id=run_id) for p in datas}
    seeds = agree_in_process(sec, run_seed=config.seed)
    trainers = {p: seeded_trainer(config=config, data=d, seeds=seeds[p]) for p, d in datas.items()}
    return SecureInProcessFederation(coordinator=coordinator, parties=trainers, secagg=sec)


def announcements_from(rows: Sequence[Mapping[str, str]]) -> list[KeyAnnouncement]:
    """KeyAnnouncements from their JSON rows."""
    return [KeyAnnouncement(r["party_id"], r["dh_public"], r["identity"], r["signature"]) for r in rows]
