"""Aggregation strategies: how the participants' values of one step become their sum at the coordinator.

A protocol's round asks for sums (`Aggregation.collect`) and its party side hands each value to the
party's `PartyAggregation` as a `Contribution`; the strategy decides what crosses the wire, the way
Flower's SecAgg+ workflow wraps an unchanged strategy:

- `PlainSum` / `PlainUpload`: each party sends the protocol's own compact message (e.g. sparse
  ternary gradients); the coordinator decodes every message and adds them up (it sees each one).
- `MaskedSum` / `MaskedUpload`: double masking (`services.crypto.double_mask`): each party sends its
  value in fixed point plus a self mask and pairwise masks, from step secrets it Shamir-shared among
  the attempt's participants at `begin`; the coordinator sees only the sum. To unmask it, the
  survivors reveal, once per step, shares of the survivors' self-mask seeds and of the dropped
  parties' step keys — never both for one party — with a majority threshold.

Either way the protocol's round is one sequence: it never knows which strategy carries its sums.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from services.crypto.double_mask import (
    StepSecrets,
    combine_private,
    combine_shares,
    pairwise_masks,
    public_key,
    seal,
    self_mask,
    step_pair_key,
    threshold_for,
    unseal,
)
from services.crypto.secagg import SecAggParty, decode_fixed, encode_fixed, prg, step_context
from services.errors import CryptoError, ProtocolError
from services.federation.fanout import fan_out
from services.federation.links import Link, Message, Step

MIN_MASKED = 2  # a masked sum over one party would be that party's value in the clear
RECOVERY = "recovery:"  # prefix of the step that unmasks a masked step's sum (after dropouts too)


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

    def opened(self, step: Step, answers: Mapping[str, Message], *, holders: Sequence[str]) -> None:
        """Take what the parties published when the attempt began (`begin` answers)."""
        ...

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

    def opened(self, step: Step, answers: Mapping[str, Message], *, holders: Sequence[str]) -> None:
        """Nothing is published for plain sums."""

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
    """Double-masked values (self mask + pairwise masks, both Shamir-shared); the coordinator sees sums only.

    `opened` keeps what the parties published at `begin` (each step's public keys, the sealed key
    shares for each peer); `collect` relays each party's sealed shares with the first summed step,
    sums the masked vectors, then asks the survivors, once, to reveal the self-mask seeds of the
    survivors and the step keys of the parties that dropped, and removes both from the sum.
    """

    name = "masked"
    min_participants = MIN_MASKED

    def __init__(self) -> None:
        self._attempt: tuple[int, int] | None = None
        self._publics: dict[str, dict[str, bytes]] = {}  # label -> party -> step public key
        self._inbox: dict[str, dict[str, str]] = {}  # recipient -> sender -> sealed shares
        self._threshold = MIN_MASKED

    def opened(self, step: Step, answers: Mapping[str, Message], *, holders: Sequence[str]) -> None:
        """Keep the step keys and sealed shares the parties published when the attempt began."""
        self._attempt = (step.round_index, step.attempt)
        self._threshold = threshold_for(len(holders))
        self._publics, self._inbox = {}, {}
        for sender, answer in answers.items():
            published = answer.get("secagg") or {}
            for label, public in dict(published.get("publics") or {}).items():
                self._publics.setdefault(str(label), {})[sender] = bytes.fromhex(str(public))
            for recipient, box in dict(published.get("sealed") or {}).items():
                self._inbox.setdefault(str(recipient), {})[sender] = str(box)

    def collect(self, *, links: Mapping[str, Link], step: Step, pool: Executor | None,
                decode: Callable[[Message], np.ndarray]) -> Collected:
        """Σ masked (mod 2^64), minus the survivors' self masks and the dropped parties' pairwise masks."""
        if self._attempt != (step.round_index, step.attempt):
            raise ProtocolError(f"{_label(step)}: the attempt's key shares were not published at begin")
        names = sorted(links)

        def ask(link: Link) -> Message:
            return link.call(step, {"participants": names, "sealed_in": self._inbox.get(link.party_id, {})})

        got, failed = fan_out(pool, links, ask)
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
        sent = sum(int(v.nbytes) for v in vectors.values())
        if len(vectors) < max(MIN_MASKED, self._threshold):
            return Collected(None, sorted(vectors), failures, sent)
        size = sizes.pop()
        total = np.zeros(size, dtype=np.uint64)
        for v in vectors.values():
            total += v
        survivors, dropped = sorted(vectors), [p for p in names if p not in vectors]
        reveal = Step(RECOVERY + step.name, step.round_index, step.attempt, step.layer)
        request: Message = {"survivors": survivors, "dropped": dropped}
        shares, failed = fan_out(pool, {p: links[p] for p in survivors}, lambda link: link.call(reveal, request))
        failures.update({p: f"unmasking {_label(step)}: {why}" for p, why in failed.items()})
        if len(shares) < self._threshold:  # the sum cannot be unmasked: the caller abandons the attempt
            return Collected(None, [], failures, sent)
        try:
            total -= self._unmask(step, shares, survivors, dropped, size)
        except (CryptoError, KeyError, TypeError, ValueError) as exc:
            failures.update({p: f"unmasking {_label(step)}: {exc}" for p in survivors})
            return Collected(None, [], failures, sent)
        return Collected(decode_fixed(total), survivors, failures, sent)

    def _unmask(self, step: Step, shares: Mapping[str, Message], survivors: Sequence[str], dropped: Sequence[str],
                size: int) -> np.ndarray:
        """The masks to remove: each survivor's self mask, and each survivor's pairwise mask with a dropped party."""
        ctx = step_context(round_index=step.round_index, attempt=step.attempt, step=step.name, layer=step.layer)
        publics = self._publics[step_label(step)]
        out = np.zeros(size, dtype=np.uint64)
        for s in survivors:
            seed = combine_shares([tuple(a["seed"][s]) for a in shares.values()], threshold=self._threshold)
            out += self_mask(seed, context=ctx, size=size)
        for d in dropped:
            private = combine_private([a["key"][d] for a in shares.values()], threshold=self._threshold)
            if public_key(private) != publics[d]:
                raise CryptoError(f"the shares of {d}'s step key do not combine to its published key")
            for s in survivors:  # s added +PRG(k_sd) when s < d, −PRG(k_sd) otherwise
                m = prg(step_pair_key(private, publics[s], context=ctx, ids=(d, s)), ctx, size)
                out = out + m if s < d else out - m
        return out


# ---- party side ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contribution:
    """A party's value for a summed step: as a flat vector (for masking) and as the protocol's own message."""

    vector: Callable[[], np.ndarray]
    message: Callable[[], Message]


class PartyAggregation(Protocol):
    """Party side of a strategy: turns a contribution into what crosses the wire."""

    name: str

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str]) -> Message:
        """At `begin`: what the strategy publishes for the attempt's summed steps (nothing when plain)."""
        ...

    def wrap(self, step: Step, message: Message, contribution: Contribution) -> Message:
        """The wire answer carrying this party's value for the step."""
        ...

    def recover(self, step: Step, message: Message) -> Message:
        """Answer an unmasking request for a masked step (refused by strategies that mask nothing)."""
        ...


def step_label(step: Step) -> str:
    """The summed step a secret belongs to: its name and layer (the recovery prefix dropped)."""
    return f"{step.name.removeprefix(RECOVERY)}|{step.layer}"


def participants_of(message: Message, field: str = "participants") -> tuple[str, ...]:
    """A sorted, de-duplicated id list from a message (ProtocolError naming the field)."""
    try:
        return tuple(sorted({str(p) for p in list(message[field])}))
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"the step names its {field}", extra={"field": field}) from exc


class PlainUpload:
    """The protocol's own message goes out as it is."""

    name = "plain"

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str]) -> Message:
        """Nothing to publish."""
        return {}

    def wrap(self, step: Step, message: Message, contribution: Contribution) -> Message:
        """The contribution's message."""
        return contribution.message()

    def recover(self, step: Step, message: Message) -> Message:
        """Nothing is masked: nothing to recover."""
        raise ProtocolError("this run does not use secure aggregation: there is nothing to recover",
                            extra={"field": "step"})


@dataclass
class _Attempt:
    """A party's double-masking state for one round attempt."""

    round_index: int
    attempt: int
    holders: tuple[str, ...]
    threshold: int
    secrets: dict[str, StepSecrets]  # label -> own step secrets
    publics: dict[str, dict[str, bytes]] = field(default_factory=dict)  # label -> party -> step public key
    shares: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # label -> owner -> my shares
    accepted: bool = False
    masked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label -> participants masked with
    revealed: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)


class MaskedUpload:
    """Double masking at a party: fresh step secrets per attempt, Shamir-shared at begin, revealed once per step.

    A value of a round is masked for one participant set only (a second set, in any attempt, would
    let two sums differ by this party's value); an unmasking request is answered once per step,
    for a partition of the parties this party masked with into survivors (self-mask seed shares)
    and dropped (step-key shares), so no party's two secrets ever leave here for the same step.
    """

    name = "masked"

    def __init__(self, *, secagg: SecAggParty, parties: Sequence[str],
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.secagg = secagg
        self.parties = frozenset(parties)
        self.random_bytes = random_bytes
        self._attempt: _Attempt | None = None
        self._sets: dict[tuple[int, str], tuple[str, ...]] = {}  # (round, label) -> the one set it was masked for

    @property
    def party_id(self) -> str:
        """Id of this party."""
        return self.secagg.party_id

    def _context(self, round_index: int, attempt: int, sender: str, recipient: str) -> str:
        return f"{self.secagg.run_id}|r{round_index}|a{attempt}|{sender}>{recipient}"

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str]) -> Message:
        """Draw this attempt's step secrets, share them among the participants, seal each peer's shares."""
        holders = tuple(sorted({str(p) for p in participants}))
        if self.party_id not in holders or len(holders) < MIN_MASKED or not set(holders) <= self.parties:
            raise ProtocolError(f"a masked round needs this party and known peers, got {list(holders)}",
                                extra={"field": "participants"})
        t = threshold_for(len(holders))
        secrets = {label: StepSecrets.draw(self.random_bytes) for label in labels}
        att = _Attempt(step.round_index, step.attempt, holders, t, secrets)
        per_holder = {label: sec.shares(holders=holders, threshold=t) for label, sec in secrets.items()}
        for label, sec in secrets.items():
            att.publics.setdefault(label, {})[self.party_id] = sec.public
            att.shares.setdefault(label, {})[self.party_id] = per_holder[label][self.party_id]
        sealed = {}
        for v in holders:
            if v == self.party_id:
                continue
            payload = {label: {"public": secrets[label].public.hex(), **per_holder[label][v]} for label in secrets}
            try:
                key = self.secagg.box_key(v)
            except CryptoError as exc:
                raise ProtocolError(exc.detail, extra={"field": "participants"}) from exc
            sealed[v] = seal(key, payload, context=self._context(step.round_index, step.attempt, self.party_id, v))
        self._attempt = att
        return {"secagg": {"publics": {label: sec.public.hex() for label, sec in secrets.items()}, "sealed": sealed}}

    def _current(self, step: Step) -> _Attempt:
        att = self._attempt
        if att is None or (att.round_index, att.attempt) != (step.round_index, step.attempt):
            raise ProtocolError(f"round {step.round_index} attempt {step.attempt} has no key shares here "
                                "(it begins with begin)", extra={"field": "round_index"})
        return att

    def _accept(self, att: _Attempt, inbox: Mapping[str, Any]) -> None:
        """Open the peers' sealed shares addressed to this party (once per attempt)."""
        if att.accepted:
            return
        for sender, box in dict(inbox).items():
            sender = str(sender)
            if sender not in att.holders or sender == self.party_id:
                raise ProtocolError(f"key shares from {sender}, not a participant of the attempt",
                                    extra={"field": "sealed_in"})
            try:
                payload = unseal(self.secagg.box_key(sender), str(box),
                                 context=self._context(att.round_index, att.attempt, sender, self.party_id))
                for label in att.secrets:
                    entry = dict(payload[label])  # type: ignore[call-overload]
                    att.publics.setdefault(label, {})[sender] = bytes.fromhex(str(entry["public"]))
                    att.shares.setdefault(label, {})[sender] = {"seed": entry["seed"], "key": entry["key"]}
            except (CryptoError, KeyError, TypeError, ValueError) as exc:
                raise ProtocolError(f"key shares of {sender} do not open: {exc}", extra={"field": "sealed_in"}) from exc
        att.accepted = True

    def wrap(self, step: Step, message: Message, contribution: Contribution) -> Message:
        """encode(x) + self mask + pairwise masks with the step's participants (each must have shared its keys)."""
        att = self._current(step)
        self._accept(att, message.get("sealed_in") or {})
        names = participants_of(message)
        label = step_label(step)
        if self.party_id not in names or len(names) < MIN_MASKED or not set(names) <= set(att.holders):
            raise ProtocolError(f"a masked step needs this party and other participants of the attempt, got "
                                f"{list(names)}", extra={"field": "participants"})
        missing = [p for p in names if p not in att.publics.get(label, {})]
        if label not in att.secrets or missing:
            raise ProtocolError(f"{label}: no step keys from {missing or 'this party'}", extra={"field": "participants"})
        first = self._sets.setdefault((step.round_index, label), names)
        if first != names:
            # two sums of one value over different sets differ by the values of the parties left out
            raise ProtocolError(f"{step.name} of round {step.round_index} was already masked for "
                                f"{list(first)}", extra={"field": "participants"})
        value = encode_fixed(contribution.vector())
        ctx = step_context(round_index=step.round_index, attempt=step.attempt, step=step.name, layer=step.layer)
        own = att.secrets[label]
        peers = {p: att.publics[label][p] for p in names if p != self.party_id}
        masked = (value + self_mask(own.seed, context=ctx, size=value.size)
                  + pairwise_masks(own.private, me=self.party_id, peers=peers, context=ctx, size=value.size))
        att.masked[label] = names
        return {"masked": masked}

    def recover(self, step: Step, message: Message) -> Message:
        """Once per step: shares of the survivors' self-mask seeds and of the dropped parties' step keys."""
        att = self._current(step)
        label = step_label(step)
        names = att.masked.get(label)
        if names is None:
            raise ProtocolError(f"{label} of round {step.round_index} attempt {step.attempt} was not masked here",
                                extra={"field": "step"})
        survivors, dropped = participants_of(message, "survivors"), participants_of(message, "dropped")
        if (set(survivors) & set(dropped) or set(survivors) | set(dropped) != set(names)
                or self.party_id not in survivors):
            raise ProtocolError(f"survivors and dropped must split the parties masked with, {list(names)}, "
                                "with this party a survivor", extra={"field": "dropped"})
        if att.revealed.setdefault(label, (survivors, dropped)) != (survivors, dropped):
            raise ProtocolError(f"{label} was already unmasked for another set of survivors", extra={"field": "dropped"})
        mine = att.shares[label]
        return {"seed": {s: mine[s]["seed"] for s in survivors}, "key": {d: mine[d]["key"] for d in dropped}}


def secure_run(secure: bool, parties: Collection[str]) -> bool:
    """Whether a run's sums are masked: as its settings say, except in a federation of one party (nobody to mask
    from: its uploads are its own sums, and no pairwise key exists)."""
    return secure and len(parties) > 1


def party_aggregation(*, secure: bool, secagg: SecAggParty, parties: Sequence[str]) -> PartyAggregation:
    """The party side of a run's strategy."""
    return MaskedUpload(secagg=secagg, parties=parties) if secure else PlainUpload()


def aggregation(*, secure: bool) -> Aggregation:
    """The coordinator side of a run's strategy."""
    return MaskedSum() if secure else PlainSum()
