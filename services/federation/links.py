"""How the coordinator reaches a party, written once for every protocol.

A protocol talks in steps: the coordinator sends a `Step` (its name, round, attempt, layer) with a
`Message` (a tree of arrays and scalars, `services.protocol.federation.pack_tree` on the wire) and
gets a `Message` back. A `Link` carries that exchange: `InProcessLink` calls a party-side
`Handler` in this process, the coordinator's HTTP link posts it to the party's federation API,
and `RecordingLink` wraps either and keeps a copy of every message for audits and attacks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

Message = dict[str, Any]  # a tree of numpy arrays, numbers, strings, lists and dicts


@dataclass(frozen=True)
class Step:
    """One exchange of a round: which step, of which round attempt, for which layer (-1: none)."""

    name: str
    round_index: int = -1
    attempt: int = 0
    layer: int = -1

    @property
    def key(self) -> tuple[int, int, str, int]:
        """Cache key of the step's answer at a party."""
        return (self.round_index, self.attempt, self.name, self.layer)


class Link(Protocol):
    """One party as a protocol's coordinator side sees it."""

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        ...

    def call(self, step: Step, message: Message) -> Message:
        """Send the step's message, return the party's answer (raises a DomainError on failure)."""
        ...


class Handler(Protocol):
    """A party's side of a protocol for one run: answers each step."""

    def handle(self, step: Step, message: Message) -> Message:
        """Answer one step."""
        ...


class InProcessLink:
    """A Link to a Handler in this process (nothing to encode or retry)."""

    def __init__(self, party_id: str, handler: Handler) -> None:
        self._party_id, self.handler = party_id, handler

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self._party_id

    def call(self, step: Step, message: Message) -> Message:
        """Hand the message to the party's handler."""
        return self.handler.handle(step, message)


@dataclass(frozen=True)
class Record:
    """One recorded message (`up`: party → coordinator)."""

    party_id: str
    step: Step
    direction: Literal["up", "down"]
    payload: Message


@dataclass
class MessageLog:
    """Messages in the order they crossed the links; `keep` decides which are stored."""

    keep: Callable[[Record], bool] = field(default=lambda r: True)
    records: list[Record] = field(default_factory=list)

    def add(self, record: Record) -> None:
        """Store a copy (the sender cannot change it afterwards) if `keep` accepts it."""
        if self.keep(record):
            self.records.append(Record(record.party_id, record.step, record.direction, _frozen(record.payload)))

    def select(self, *, party_id: str | None = None, step: str | None = None, direction: str | None = None,
               round_index: int | None = None, layer: int | None = None) -> Iterator[Record]:
        """Records matching every given field, in order."""
        for r in self.records:
            if ((party_id is None or r.party_id == party_id) and (step is None or r.step.name == step)
                    and (direction is None or r.direction == direction)
                    and (round_index is None or r.step.round_index == round_index)
                    and (layer is None or r.step.layer == layer)):
                yield r

    def find(self, *, party_id: str, step: str, direction: str, round_index: int, layer: int = -1) -> Message:
        """The last attempt's message of a party at a step; KeyError if none was recorded."""
        hits = list(self.select(party_id=party_id, step=step, direction=direction, round_index=round_index,
                                layer=layer))
        if not hits:
            raise KeyError(f"no {direction} {step} message of {party_id} in round {round_index} (layer {layer})")
        return hits[-1].payload


class RecordingLink:
    """A Link decorator that logs a copy of both messages of every step, then returns the answer unchanged."""

    def __init__(self, inner: Link, log: MessageLog) -> None:
        self.inner, self.log = inner, log

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.inner.party_id

    def call(self, step: Step, message: Message) -> Message:
        """Log the message down, forward it, log the answer up."""
        self.log.add(Record(self.party_id, step, "down", message))
        answer = self.inner.call(step, message)
        self.log.add(Record(self.party_id, step, "up", answer))
        return answer


def _frozen(value: Any) -> Any:
    """A deep copy of a message tree (arrays copied)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_frozen(v) for v in value]
    return copy.deepcopy(value)
