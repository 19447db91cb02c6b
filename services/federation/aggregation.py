"""Aggregation strategies: how the participants' values of one step become their sum at the coordinator.

A protocol's round asks for sums (`Aggregation.collect`) and its party side hands each value to the
party's `PartyAggregation` as a `Contribution`; the strategy decides what crosses the wire, the way
Flower's SecAgg+ workflow wraps an unchanged strategy:

- `PlainSum` / `PlainUpload`: each party sends the protocol's own compact message (e.g. sparse
  ternary gradients); the coordinator decodes every message and adds them up (it sees each one).
- `MaskedSum` / `MaskedUpload`: each party sends its value in fixed point plus pairwise masks that
  cancel in the sum; the coordinator sees only the sum. A participant that drops out after the
  masks were drawn is recovered from: the survivors reveal their masks with it, for that step only.

Either way the protocol's round is one sequence: it never knows which strategy carries its sums.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from services.crypto.secagg import SecAggParty, decode_fixed, encode_fixed, step_context
from services.errors import CryptoError, ProtocolError
from services.federation.fanout import fan_out
from services.federation.links import Link, Message, Step

MIN_MASKED = 2  # a masked sum over one party would be that party's value in the clear
RECOVERY = "recovery:"  # prefix of the step that recovers a masked step after a dropout


def message_bytes(message: object) -> int:
    """Bytes of the arrays in a message tree (what the wire carries, less the framing)."""
    if isinstance(message, np.ndarray):
        return int(message.nbytes)
    if isinstance(message, dict):
        return sum(message_bytes(v) for v in message.values())
    if isinstance(message, (list, tuple)):
        return sum(message_bytes(v) for v in message)
    return 8


@dataclass
class Collected:
    """A step's sum over the parties that contributed, or None when it could not be formed."""

    total: np.ndarray | None
    contributors: list[str]
    failures: dict[str, str] = field(default_factory=dict)
    upload_bytes: int = 0


class Aggregation(Protocol):
    """Coordinator side of a strategy: collects one step's values from the live parties as a sum."""

    name: str
    min_participants: int

    def collect(self, *, links: Mapping[str, Link], step: Step, pool: Executor | None,
                decode: Callable[[Message], np.ndarray]) -> Collected:
        """Ask every party for the step, return the flat float64 sum over those that answered."""
        ...


def _ask(links: Mapping[str, Link], step: Step, pool: Executor | None) -> tuple[dict[str, Message], dict[str, str]]:
    message: Message = {"participants": sorted(links)}
    return fan_out(pool, links, lambda link: link.call(step, message))


def _label(step: Step) -> str:
    return step.name if step.layer < 0 else f"{step.name}[{step.layer}]"


class PlainSum:
    """Each party's own message, decoded and added up by the coordinator."""

    name = "plain"
    min_participants = 1

    def collect(self, *, links: Mapping[str, Link], step: Step, pool: Executor | None,
                decode: Callable[[Message], np.ndarray]) -> Collected:
        """Decode each answer (a bad one is that party's failure), sum in party order."""
        got, failed = _ask(links, step, pool)
        vectors: dict[str, np.ndarray] = {}
        for pid in sorted(got):
            try:
                vectors[pid] = np.asarray(decode(got[pid]), dtype=np.float64).ravel()
            except (ProtocolError, KeyError, ValueError, TypeError) as exc:
                failed[pid] = f"bad {step.name} answer: {exc}"
        sizes = {v.size for v in vectors.values()}
        if len(sizes) > 1:
            raise ProtocolError(f"{_label(step)}: values of different sizes {sorted(sizes)}")
        failures = {p: f"{_label(step)}: {why}" for p, why in failed.items()}
        if not vectors:
            return Collected(None, [], failures)
        total = np.zeros(sizes.pop(), dtype=np.float64)
        for pid in sorted(vectors):
            total += vectors[pid]
        return Collected(total, sorted(vectors), failures, sum(message_bytes(got[p]) for p in vectors))


class MaskedSum:
    """Masked values whose masks cancel in the sum; dropouts recovered from the survivors' masks."""

    name = "masked"
    min_participants = MIN_MASKED

    def collect(self, *, links: Mapping[str, Link], step: Step, pool: Executor | None,
                decode: Callable[[Message], np.ndarray]) -> Collected:
        """Σ masked (mod 2^64), minus the survivors' masks with parties that dropped, decoded."""
        names = sorted(links)
        got, failed = _ask(links, step, pool)
        failures = {p: f"{_label(step)}: {why}" for p, why in failed.items()}
        vectors: dict[str, np.ndarray] = {}
        for pid, answer in got.items():
            try:
                vectors[pid] = np.asarray(answer["masked"], dtype=np.uint64).ravel()
            except (KeyError, ValueError, TypeError) as exc:
                failures[pid] = f"{_label(step)}: bad masked answer: {exc}"
        sizes = {v.size for v in vectors.values()}
        if len(sizes) > 1:
            raise ProtocolError(f"{_label(step)}: masked vectors of different sizes {sorted(sizes)}")
        if len(vectors) < MIN_MASKED:
            return Collected(None, sorted(vectors), failures)
        total = np.zeros(sizes.pop(), dtype=np.uint64)
        for v in vectors.values():
            total += v
        sent = sum(int(v.nbytes) for v in vectors.values())
        dropped = [p for p in names if p not in vectors]
        if dropped:
            survivors = {p: links[p] for p in sorted(vectors)}
            ask = Step(RECOVERY + step.name, step.round_index, step.attempt, step.layer)
            rec, failed = fan_out(pool, survivors, lambda link: link.call(ask, {"dropped": dropped}))
            if failed:  # the sum cannot be unmasked: the caller abandons the attempt (retried with fresh masks)
                failures.update({p: f"recovery of {_label(step)}: {why}" for p, why in failed.items()})
                return Collected(None, [], failures, sent)
            for answer in rec.values():
                total -= np.asarray(answer["mask"], dtype=np.uint64).ravel()
        return Collected(decode_fixed(total), sorted(vectors), failures, sent)


# ---- party side ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contribution:
    """A party's value for a summed step: as a flat vector (for masking) and as the protocol's own message."""

    vector: Callable[[], np.ndarray]
    message: Callable[[], Message]


class PartyAggregation(Protocol):
    """Party side of a strategy: turns a contribution into what crosses the wire."""

    name: str

    def wrap(self, step: Step, participants: Sequence[str], contribution: Contribution) -> Message:
        """The wire answer carrying this party's value for the step."""
        ...

    def recover(self, step: Step, message: Message) -> Message:
        """Answer a recovery request for a masked step (refused by strategies that mask nothing)."""
        ...


class PlainUpload:
    """The protocol's own message goes out as it is."""

    name = "plain"

    def wrap(self, step: Step, participants: Sequence[str], contribution: Contribution) -> Message:
        """The contribution's message."""
        return contribution.message()

    def recover(self, step: Step, message: Message) -> Message:
        """Nothing is masked: nothing to recover."""
        raise ProtocolError("this run does not use secure aggregation: there is nothing to recover",
                            extra={"field": "step"})


class MaskedUpload:
    """Values in fixed point plus pairwise masks with the step's participants (one masking per value)."""

    name = "masked"

    def __init__(self, *, secagg: SecAggParty, parties: Sequence[str]) -> None:
        self.secagg = secagg
        self.parties = frozenset(parties)
        # (round, step, layer) -> (attempt, participants, size): what this party masked, and with whom
        self._masked: dict[tuple[int, str, int], tuple[int, tuple[str, ...], int]] = {}
        self._recovered: dict[tuple[int, int, str, int], tuple[str, ...]] = {}

    @property
    def party_id(self) -> str:
        """Id of this party."""
        return self.secagg.party_id

    def _participants(self, participants: Sequence[str]) -> tuple[str, ...]:
        names = tuple(sorted({str(p) for p in participants}))
        if self.party_id not in names or len(names) < MIN_MASKED:
            raise ProtocolError(f"a masked step needs this party and another participant, got {list(names)}",
                                extra={"field": "participants"})
        unknown = [p for p in names if p not in self.parties]
        if unknown:
            raise ProtocolError(f"unknown participants {unknown}", extra={"field": "participants"})
        return names

    def wrap(self, step: Step, participants: Sequence[str], contribution: Contribution) -> Message:
        """Mask the value once per (round, step, layer): never again for another set or attempt's set."""
        names = self._participants(participants)
        key = (step.round_index, step.name, step.layer)
        before = self._masked.get(key)
        if before is not None and before[1] != names:
            # two maskings of one value over different sets differ by masks a recovery could reveal
            raise ProtocolError(f"{step.name} of round {step.round_index} was already masked for other "
                                f"participants {list(before[1])}", extra={"field": "participants"})
        value = encode_fixed(contribution.vector())
        ctx = step_context(round_index=step.round_index, attempt=step.attempt, step=step.name, layer=step.layer)
        try:
            masked = self.secagg.mask(value, participants=names, context=ctx)
        except CryptoError as exc:
            raise ProtocolError(exc.detail, extra={"field": "participants"}) from exc
        self._masked[key] = (step.attempt, names, int(value.size))
        return {"masked": masked}

    def recover(self, step: Step, message: Message) -> Message:
        """This party's masks with parties that dropped out of a step it masked with them, once per step."""
        name = step.name.removeprefix(RECOVERY)
        try:
            dropped = tuple(sorted({str(p) for p in list(message["dropped"])}))
        except (KeyError, TypeError) as exc:
            raise ProtocolError("a recovery request names the dropped parties", extra={"field": "dropped"}) from exc
        masked = self._masked.get((step.round_index, name, step.layer))
        if masked is None or masked[0] != step.attempt:
            raise ProtocolError(f"{name} of round {step.round_index} attempt {step.attempt} was not masked here",
                                extra={"field": "step"})
        _, names, size = masked
        if not dropped or self.party_id in dropped or not set(dropped) <= set(names):
            raise ProtocolError(f"recovery only for peers this party masked {name} with: {list(names)}",
                                extra={"field": "dropped"})
        key = (step.round_index, step.attempt, name, step.layer)
        if self._recovered.setdefault(key, dropped) != dropped:
            raise ProtocolError(f"{name} was already recovered for {list(self._recovered[key])}",
                                extra={"field": "dropped"})
        ctx = step_context(round_index=step.round_index, attempt=step.attempt, step=name, layer=step.layer)
        return {"mask": self.secagg.recovery(dropped=dropped, size=size, context=ctx)}


def party_aggregation(*, secure: bool, secagg: SecAggParty, parties: Sequence[str]) -> PartyAggregation:
    """The party side of a run's strategy."""
    return MaskedUpload(secagg=secagg, parties=parties) if secure else PlainUpload()


def aggregation(*, secure: bool) -> Aggregation:
    """The coordinator side of a run's strategy."""
    return MaskedSum() if secure else PlainSum()
