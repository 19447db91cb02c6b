"""Aggregation strategies: how the participants' values of one step become their sum at the coordinator.

A protocol's round asks for sums (`Aggregation.collect`) and its party side hands each value to the
party's `PartyAggregation` as a `Contribution`; the strategy decides what crosses the wire, the way
Flower's SecAgg+ workflow wraps an unchanged strategy:

- `PlainSum` / `PlainUpload`: each party sends the protocol's own compact message (e.g. sparse
  ternary gradients); the coordinator decodes every message and adds them up (it sees each one).
- `MaskedSum` / `MaskedUpload`: double masking (`services.crypto.double_mask`): each party sends its
  value in fixed point plus a self mask and pairwise masks, from step secrets it Shamir-shared among
  the attempt's participants at `begin`; the coordinator sees only the sum. To unmask it, the
  survivors first sign the survivor set with their identity keys (`consistency:STEP`, the
  consistency round of Bonawitz et al. 2017); then each reveals, once per step and only when shown
  at least t valid signatures over the set it signed itself, shares of the survivors' self-mask
  seeds and of the dropped parties' step keys — never both for one party — with a majority threshold.

Either way the protocol's round is one sequence: it never knows which strategy carries its sums.
"""

from __future__ import annotations

import hashlib
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
from services.crypto.secagg import (
    SecAggParty,
    decode_fixed,
    encode_fixed,
    prg,
    signature_valid,
    step_context,
    survivors_statement,
)
from services.errors import CryptoError, ProtocolError
from services.federation.fanout import fan_out
from services.federation.links import Link, Message, Step

MIN_MASKED = 2  # a masked sum over one party would be that party's value in the clear
RECOVERY = "recovery:"  # prefix of the step that unmasks a masked step's sum (after dropouts too)
KEEP_VERSIONS = 8  # state versions whose masked sets a party keeps (a retry rewinds to a kept snapshot only)
VALUE_PREFIX = "masked-value:"  # + a value's digest: the party-wide record of the set it was masked for
CONSISTENCY = "consistency:"  # prefix of the step where the survivors sign the survivor set, before any reveal


def inputs_digest(message: Mapping[str, Any]) -> str:
    """SHA-256 of the public parameters a `begin` carries (what the survivors' consistency signatures bind)."""
    public = message.get("public")
    h = hashlib.sha256()
    if isinstance(public, Mapping):
        for name in sorted(public, key=str):
            arr = np.ascontiguousarray(public[name])
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


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
    shares for each peer, the threshold); `collect` relays each party's sealed shares with the first
    summed step, sums the masked vectors, asks the survivors to sign the survivor set (consistency
    round), then asks the signers, once, to reveal the self-mask seeds of the survivors and the step
    keys of the parties that dropped (showing them the signatures), and removes both from the sum.
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
            # parties share with t of the configured peer set when that is higher (they refuse fewer shares)
            self._threshold = max(self._threshold, int(published.get("threshold") or 0))
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
        # consistency round: every survivor signs the one survivor set before anyone reveals a share
        check = Step(CONSISTENCY + step.name, step.round_index, step.attempt, step.layer)
        signed, failed = fan_out(pool, {p: links[p] for p in survivors},
                                 lambda link: link.call(check, {"survivors": survivors}))
        failures.update({p: f"signing the survivors of {_label(step)}: {why}" for p, why in failed.items()})
        signatures = {p: str(a.get("signature", "")) for p, a in signed.items()}
        repeats = {p: str(a.get("repeat", "")) for p, a in signed.items()}  # signed with the survivor set
        if len(signatures) < self._threshold:
            return Collected(None, [], failures, sent)
        reveal = Step(RECOVERY + step.name, step.round_index, step.attempt, step.layer)
        request: Message = {"survivors": survivors, "dropped": dropped, "signatures": signatures, "repeats": repeats}
        shares, failed = fan_out(pool, {p: links[p] for p in sorted(signatures)},
                                 lambda link: link.call(reveal, request))
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

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str], *,
                   inputs: str = "") -> Message:
        """At `begin`: what the strategy publishes for the attempt's summed steps (nothing when plain)."""
        ...

    def wrap(self, step: Step, message: Message, contribution: Contribution) -> Message:
        """The wire answer carrying this party's value for the step."""
        ...

    def consistency(self, step: Step, message: Message) -> Message:
        """Sign the survivor set of a masked step (refused by strategies that mask nothing)."""
        ...

    def recover(self, step: Step, message: Message) -> Message:
        """Answer an unmasking request for a masked step (refused by strategies that mask nothing)."""
        ...

    def check_summed(self, step: Step, participants: Sequence[str]) -> None:
        """A sum handed down (`total`) must name exactly the survivors this party signed for `step` (masked)."""
        ...


def step_label(step: Step) -> str:
    """The summed step a secret belongs to: its name and layer (the recovery prefix dropped)."""
    return f"{step.name.removeprefix(RECOVERY).removeprefix(CONSISTENCY)}|{step.layer}"


def participants_of(message: Message, field: str = "participants") -> tuple[str, ...]:
    """A sorted, de-duplicated id list from a message (ProtocolError naming the field)."""
    try:
        return tuple(sorted({str(p) for p in list(message[field])}))
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"the step names its {field}", extra={"field": field}) from exc


class PlainUpload:
    """The protocol's own message goes out as it is."""

    name = "plain"

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str], *,
                   inputs: str = "") -> Message:
        """Nothing to publish."""
        return {}

    def wrap(self, step: Step, message: Message, contribution: Contribution) -> Message:
        """The contribution's message."""
        return contribution.message()

    def consistency(self, step: Step, message: Message) -> Message:
        """Nothing is masked: no survivor set to sign."""
        raise ProtocolError("this run does not use secure aggregation: there is no survivor set to sign",
                            extra={"field": "step"})

    def recover(self, step: Step, message: Message) -> Message:
        """Nothing is masked: nothing to recover."""
        raise ProtocolError("this run does not use secure aggregation: there is nothing to recover",
                            extra={"field": "step"})

    def check_summed(self, step: Step, participants: Sequence[str]) -> None:
        """Plain sums: the coordinator saw every value, nothing to bind."""


class ValueLedger:
    """Party-wide record of every exact value this party masked: the one set it was masked for, and the first
    sum it was unmasked in.

    Keyed on a SHA-256 of the value's fixed-point encoding, whatever run, round, attempt, step or public
    parameters produced it. A value is masked for one participant set only (`claim`); and a party reveals shares
    of a sum only when at least t of its survivors bring values never unmasked before, or the sum is exactly one
    already unmasked (`revealed`, signed in the consistency round): so every new sum holds at least t values
    that appear in no earlier sum, and no linear combination of the sums isolates fewer than t parties' values.
    The owner persists `drain()`'s rows (before the answer leaves) and passes them back after a restart.
    """

    def __init__(self, known: Mapping[str, Any] | None = None) -> None:
        self._sets: dict[str, tuple[str, ...]] = {}
        self._revealed: dict[str, str] = {}
        for key, row in (known or {}).items():
            if isinstance(row, Mapping):
                self._sets[str(key)] = tuple(row.get("set") or ())
                if row.get("revealed"):
                    self._revealed[str(key)] = str(row["revealed"])
            else:
                self._sets[str(key)] = tuple(row)
        self._dirty: set[str] = set()

    @staticmethod
    def digest(value: np.ndarray) -> str:
        """What identifies a value: its exact fixed-point encoding."""
        return hashlib.sha256(np.ascontiguousarray(value, dtype=np.uint64).tobytes()).hexdigest()

    def claim(self, value: np.ndarray, names: tuple[str, ...]) -> tuple[str, ...]:
        """The set `value` is masked for: `names` on first use (recorded), else the set it was first masked for."""
        key = self.digest(value)
        if key not in self._sets:
            self._sets[key] = names
            self._dirty.add(key)
        return self._sets[key]

    def revealed(self, key: str) -> str:
        """The sum a value was first unmasked in ("" if never): `run|round|attempt|label|survivors`."""
        return self._revealed.get(key, "")

    def reveal(self, key: str, instance: str) -> None:
        """Record that this party gave shares unmasking a sum holding the value (the first such sum is kept)."""
        if key not in self._revealed:
            self._revealed[key] = instance
            self._dirty.add(key)

    def drain(self) -> dict[str, dict[str, Any]]:
        """The rows changed since the last drain, to persist."""
        out = {k: {"set": list(self._sets.get(k, ())), "revealed": self._revealed.get(k, "")} for k in self._dirty}
        self._dirty = set()
        return out


def sum_instance(*, run_id: str, round_index: int, attempt: int, label: str, survivors: Sequence[str]) -> str:
    """Names one unmasked sum: the same string for two sums means the same values over the same survivors."""
    return f"{run_id}|r{round_index}|a{attempt}|{label}|{','.join(sorted(survivors))}"


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
    version: int = -1  # the party's state version the attempt's values are computed from
    inputs: str = ""  # digest of the public parameters the attempt began with (bound by the consistency round)
    accepted: bool = False
    masked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label -> participants masked with
    digests: dict[str, str] = field(default_factory=dict)  # label -> the ledger key of the value masked
    repeats: dict[str, str] = field(default_factory=dict)  # label -> the earlier sum it was unmasked in, signed
    signed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label -> the one survivor set signed
    revealed: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)


class MaskedUpload:
    """Double masking at a party: fresh step secrets per attempt, Shamir-shared at begin, revealed once per step.

    The participant universe is the peer set fixed at configuration (`parties`): a round over anyone
    outside it, or over fewer than that set's threshold, is refused. One set per value, twice over: a
    state version of the party (what applying a round's update changes, `version`) is masked for one
    participant set only, whatever public parameters a begin carries (values nudged through parameters
    are nearly the same value), and an exact value is masked for one set only, party-wide across runs
    and restarts (`ValueLedger`). An
    unmasking request is answered once per step, only after this party signed that step's survivor
    set and is shown at least t valid signatures of authenticated peers over the same set (the
    consistency round), and only for a partition of the parties it masked with into survivors
    (self-mask seed shares) and dropped (step-key shares): no party's two secrets leave for one step.
    """

    name = "masked"

    def __init__(self, *, secagg: SecAggParty, parties: Sequence[str],
                 random_bytes: Callable[[int], bytes] = os.urandom,
                 version: Callable[[Step], int] | None = None, configured: Sequence[str] | None = None,
                 ledger: ValueLedger | None = None) -> None:
        self.secagg = secagg
        self.parties = frozenset(parties)
        # the peer set fixed at the run's first key agreement (a later one may only have left parties out)
        self.configured = frozenset(parties if configured is None else configured)
        self.random_bytes = random_bytes
        # the party's state version a round begins from; without one (in-process runs), the round index
        self.version = version or (lambda step: step.round_index)
        self.ledger = ledger if ledger is not None else ValueLedger()
        self._attempt: _Attempt | None = None
        # (version, label) -> the one set it was masked for
        self._sets: dict[tuple[int, str], tuple[str, ...]] = {}
        # version -> the set the first masked step of that state went to
        self._holders: dict[int, tuple[str, ...]] = {}
        # (version, label) -> the first sum a value of that state was unmasked in: a later value of the same state
        # (other public parameters, a replayed sum) is nearly the same value, so it counts as a repeat, not fresh
        self._opened: dict[tuple[int, str], str] = {}

    @property
    def party_id(self) -> str:
        """Id of this party."""
        return self.secagg.party_id

    @property
    def floor(self) -> int:
        """The fewest participants a masked round may have: the threshold of the configured peer set."""
        return max(MIN_MASKED, threshold_for(len(self.configured)))

    def export(self) -> dict[str, Any]:
        """Which participant set each state version (and each of its values) was masked for, to persist."""
        keep = set(sorted(self._holders)[-KEEP_VERSIONS:])
        return {"holders": [[v, list(h)] for v, h in sorted(self._holders.items()) if v in keep],
                "sets": [[v, label, list(names)] for (v, label), names in sorted(self._sets.items()) if v in keep],
                "opened": [[v, label, first] for (v, label), first in sorted(self._opened.items()) if v in keep]}

    def load(self, saved: Mapping[str, Any]) -> None:
        """Restore what `export` kept (a party restarted mid-run masks nothing again for another set).

        Records of earlier releases (keyed by version alone, or by version and inputs digest) keep their
        strictest reading: any set recorded for a version binds that version.
        """
        holders = saved.get("holders") or []
        rows = [[v, h] for v, h in holders.items()] if isinstance(holders, Mapping) else list(holders)
        self._holders = {}
        for row in rows:
            self._holders.setdefault(int(row[0]), tuple(row[-1]))
        self._sets = {}
        for row in list(saved.get("sets") or []):
            self._sets.setdefault((int(row[0]), str(row[-2])), tuple(row[-1]))
        self._opened = {(int(v), str(label)): str(first) for v, label, first in list(saved.get("opened") or [])}

    def _bound_set(self, version: int, label: str | None) -> tuple[str, ...] | None:
        """The one set a state version (label None: its first masked step; else that step's value) was masked for."""
        return self._holders.get(version) if label is None else self._sets.get((version, label))

    def _context(self, round_index: int, attempt: int, sender: str, recipient: str) -> str:
        return f"{self.secagg.run_id}|r{round_index}|a{attempt}|{sender}>{recipient}"

    def check_begin(self, participants: Sequence[str], *, version: int) -> tuple[str, ...]:
        """The attempt's participants, sorted; ProtocolError when a round over them may not begin here."""
        holders = tuple(sorted({str(p) for p in participants}))
        outside = sorted(set(holders) - self.parties)
        if outside:
            raise ProtocolError(f"participants {outside} are outside the peer set fixed at configuration "
                                f"{sorted(self.parties)}", extra={"field": "participants"})
        if self.party_id not in holders or len(holders) < self.floor:
            raise ProtocolError(f"a masked round needs this party and at least {self.floor} parties (the threshold "
                                f"of the configured peer set of {len(self.configured)}), got {list(holders)}",
                                extra={"field": "participants"})
        first = self._bound_set(version, None)
        if first is not None and first != holders:
            # two sums of one value over different sets differ by the values of the parties left out; public
            # parameters do not make another value (a layer may not read them, or they may be nudged)
            raise ProtocolError(f"one mask per value: this party's state version {version} was already masked for "
                                f"{list(first)}, not again for {list(holders)}", extra={"field": "participants"})
        return holders

    def open_round(self, step: Step, participants: Sequence[str], labels: Sequence[str], *,
                   inputs: str = "") -> Message:
        """Draw this attempt's step secrets, share them among the participants, seal each peer's shares."""
        version = self.version(step)
        holders = self.check_begin(participants, version=version)
        t = max(threshold_for(len(holders)), threshold_for(len(self.configured)))
        secrets = {label: StepSecrets.draw(self.random_bytes) for label in labels}
        att = _Attempt(step.round_index, step.attempt, holders, t, secrets, version=version, inputs=inputs)
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
        return {"secagg": {"publics": {label: sec.public.hex() for label, sec in secrets.items()}, "sealed": sealed,
                           "threshold": t}}

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
        first = self._bound_set(att.version, label) or names
        if first != names:
            # two sums of one value over different sets differ by the values of the parties left out
            raise ProtocolError(f"one mask per value: {step.name} of state version {att.version} was already masked "
                                f"for {list(first)}", extra={"field": "participants"})
        value = encode_fixed(contribution.vector())
        first = self.ledger.claim(value, names)
        if first != names:  # the same value again (another run, round or parameters the value does not read)
            raise ProtocolError(f"one mask per value: this exact {label} value was already masked for {list(first)}, "
                                f"not again for {list(names)}", extra={"field": "participants"})
        self._sets[(att.version, label)] = names
        # a begin is then only accepted over this set: the coordinator's retry of the round goes to it
        self._holders.setdefault(att.version, names)
        ctx = step_context(round_index=step.round_index, attempt=step.attempt, step=step.name, layer=step.layer)
        own = att.secrets[label]
        peers = {p: att.publics[label][p] for p in names if p != self.party_id}
        masked = (value + self_mask(own.seed, context=ctx, size=value.size)
                  + pairwise_masks(own.private, me=self.party_id, peers=peers, context=ctx, size=value.size))
        att.masked[label] = names
        att.digests[label] = self.ledger.digest(value)
        return {"masked": masked}

    def _masked_with(self, att: _Attempt, step: Step) -> tuple[str, tuple[str, ...]]:
        label = step_label(step)
        names = att.masked.get(label)
        if names is None:
            raise ProtocolError(f"{label} of round {step.round_index} attempt {step.attempt} was not masked here",
                                extra={"field": "step"})
        return label, names

    def _statement(self, att: _Attempt, label: str, survivors: Sequence[str], repeat: str) -> bytes:
        return survivors_statement(run_id=self.secagg.run_id, round_index=att.round_index, attempt=att.attempt,
                                   label=label, survivors=survivors, inputs=f"{att.inputs}|{repeat}")

    def consistency(self, step: Step, message: Message) -> Message:
        """Sign one survivor set per step (this party in it, at least t parties, all of them masked with)."""
        att = self._current(step)
        label, names = self._masked_with(att, step)
        survivors = participants_of(message, "survivors")
        if self.party_id not in survivors or not set(survivors) <= set(names):
            raise ProtocolError(f"consistency round: the survivor set must name this party and only parties it "
                                f"masked with, {list(names)}", extra={"field": "survivors"})
        if len(survivors) < att.threshold:
            raise ProtocolError(f"consistency round: {len(survivors)} survivors, fewer than the threshold "
                                f"{att.threshold}", extra={"field": "survivors"})
        first = att.signed.setdefault(label, survivors)
        if first != survivors:
            raise ProtocolError(f"consistency round: {label} was already signed for survivors {list(first)} "
                                "(one survivor set per step)", extra={"field": "survivors"})
        # whether this party's value was unmasked before, signed: the other survivors count fresh values from it
        repeat = att.repeats.setdefault(label, self.ledger.revealed(att.digests[label])
                                        or self._opened.get((att.version, label), ""))
        return {"signature": self.secagg.sign(self._statement(att, label, survivors, repeat)), "repeat": repeat}

    def _signed_by(self, party_id: str, statement: bytes, signature: object) -> bool:
        """Whether the signature is the party's, under the identity key authenticated at key agreement."""
        identity = self.secagg.identity if party_id == self.party_id else self.secagg.identities.get(party_id)
        return identity is not None and signature_valid(identity, statement, str(signature))

    def recover(self, step: Step, message: Message) -> Message:
        """Once per step, after the consistency round: shares of the survivors' self-mask seeds and of the
        dropped parties' step keys."""
        att = self._current(step)
        label, names = self._masked_with(att, step)
        survivors, dropped = participants_of(message, "survivors"), participants_of(message, "dropped")
        if (set(survivors) & set(dropped) or set(survivors) | set(dropped) != set(names)
                or self.party_id not in survivors):
            raise ProtocolError(f"survivors and dropped must split the parties masked with, {list(names)}, "
                                "with this party a survivor", extra={"field": "dropped"})
        if att.revealed.get(label, (survivors, dropped)) != (survivors, dropped):
            raise ProtocolError(f"{label} was already unmasked for another set of survivors", extra={"field": "dropped"})
        signed = att.signed.get(label)
        if signed != survivors:
            raise ProtocolError(f"consistency round: this party signed {list(signed) if signed else 'no'} survivor set "
                                f"for {label}, not {list(survivors)}; it reveals shares only for the set it signed",
                                extra={"field": "survivors"})
        signatures = message.get("signatures")
        if not isinstance(signatures, dict):
            raise ProtocolError("consistency round: the request carries the survivors' signatures",
                                extra={"field": "signatures"})
        repeats = message.get("repeats") or {}
        if not isinstance(repeats, dict):
            raise ProtocolError("consistency round: repeats maps each signer to what it signed",
                                extra={"field": "repeats"})
        claims = {str(p): (att.repeats[label] if str(p) == self.party_id else str(repeats.get(p, "")))
                  for p in signatures}
        valid = [p for p, sig in signatures.items() if str(p) in survivors
                 and self._signed_by(str(p), self._statement(att, label, survivors, claims[str(p)]), sig)]
        if len(valid) < att.threshold:
            # t parties must have signed the same set and the same inputs (a party told other public parameters
            # signs another statement and does not count); a survivor that failed after its masked step need not
            # sign (its shares are with the others), else one crash would stall the round
            raise ProtocolError(f"consistency round: {len(valid)} valid signatures of authenticated peers over the "
                                f"survivor set and the attempt's inputs ({sorted(valid)}), {att.threshold} needed",
                                extra={"field": "signatures"})
        self._check_fresh(att, label, survivors, {str(p): claims[str(p)] for p in valid})
        att.revealed.setdefault(label, (survivors, dropped))
        instance = sum_instance(run_id=self.secagg.run_id, round_index=att.round_index, attempt=att.attempt,
                                label=label, survivors=survivors)
        self.ledger.reveal(att.digests[label], instance)
        self._opened.setdefault((att.version, label), instance)
        mine = att.shares[label]
        return {"seed": {s: mine[s]["seed"] for s in survivors}, "key": {d: mine[d]["key"] for d in dropped}}

    @staticmethod
    def _check_fresh(att: _Attempt, label: str, survivors: Sequence[str], claims: Mapping[str, str]) -> None:
        """At least t signed survivors bring values never unmasked before, or every survivor repeats the one sum
        it was unmasked in over these same survivors (an honest retry: the same sum again). Otherwise a new sum
        would differ from earlier ones by fewer than t parties' values (some kept, one moved on)."""
        fresh = [p for p, c in claims.items() if not c]
        seen = set(claims.values())
        again = (len(claims) == len(survivors) and len(seen) == 1
                 and next(iter(seen)).rsplit("|", 1)[-1] == ",".join(sorted(survivors)))
        if len(fresh) < att.threshold and not again:
            raise ProtocolError(f"fresh values: {label} over {list(survivors)} holds {len(fresh)} values never "
                                f"unmasked before ({sorted(fresh)}), {att.threshold} needed; the others repeat "
                                f"{sorted(c for c in seen if c)}", extra={"field": "survivors"})

    def check_summed(self, step: Step, participants: Sequence[str]) -> None:
        """The sum handed down must name exactly the survivor set this party signed for the step (the only set
        its shares unmasked), so the participation estimate and the next values follow the sum that was formed."""
        att = self._current(step)
        signed = att.signed.get(step_label(step))
        if signed is None or tuple(sorted({str(p) for p in participants})) != signed:
            raise ProtocolError(f"{step_label(step)}: the sum must name the survivors this party signed "
                                f"({list(signed) if signed else 'none yet'}), got {sorted(participants)}",
                                extra={"field": "participants"})


def secure_run(secure: bool, parties: Collection[str]) -> bool:
    """Whether a run's sums are masked: as its settings say, except in a federation of one party (nobody to mask
    from: its uploads are its own sums, and no pairwise key exists)."""
    return secure and len(parties) > 1


def party_aggregation(*, secure: bool, secagg: SecAggParty, parties: Sequence[str],
                      version: Callable[[Step], int] | None = None,
                      configured: Sequence[str] | None = None, ledger: ValueLedger | None = None) -> PartyAggregation:
    """The party side of a run's strategy (`parties`: the authenticated peers; `configured`: the peer set fixed
    at configuration, `parties` when not given; `version`: the party's state version a round begins from;
    `ledger`: the party-wide record of masked values)."""
    if not secure:
        return PlainUpload()
    return MaskedUpload(secagg=secagg, parties=parties, version=version, configured=configured, ledger=ledger)


def aggregation(*, secure: bool) -> Aggregation:
    """The coordinator side of a run's strategy."""
    return MaskedSum() if secure else PlainSum()
