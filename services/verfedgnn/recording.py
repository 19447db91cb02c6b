"""A PartyLink that records every message it carries (for privacy audits and attack benchmarks).

`RecordingLink` wraps any `PartyLink` (in-process or HTTP) and keeps a copy of what crossed it,
in both directions, as the domain values the round sequence hands over: the public parameters a
party downloads, each projection Y_p^k it uploads, the relayed sum it receives, its gradient
upload. Nothing in the round changes: the wrapped link is called with the same arguments and its
answers are returned unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from services.verfedgnn.rounds import InProcessFederation, PartyLink
from services.verfedgnn.types import GradientUpload

Step = Literal["begin", "projection", "others", "finish"]


@dataclass(frozen=True)
class Message:
    """One message between the coordinator and a party (`up`: party → coordinator)."""

    party_id: str
    round_index: int
    attempt: int
    step: Step
    layer: int | None
    direction: Literal["up", "down"]
    payload: object  # dict of arrays (begin), ndarray (projection, others) or GradientUpload (finish)


@dataclass
class MessageLog:
    """Messages in the order they crossed the links; `keep` decides which are stored."""

    keep: Callable[[Message], bool] = field(default=lambda m: True)
    messages: list[Message] = field(default_factory=list)

    def add(self, message: Message) -> None:
        """Store a copy of the message (the sender cannot change it afterwards) if `keep` accepts it."""
        if self.keep(message):
            self.messages.append(Message(message.party_id, message.round_index, message.attempt, message.step,
                                         message.layer, message.direction, _frozen(message.payload)))

    def find(self, *, party_id: str, step: Step, round_index: int, layer: int | None = None) -> Message:
        """The (last attempt's) message of a party at a step; KeyError if none was recorded."""
        hits = [m for m in self.messages if m.party_id == party_id and m.step == step
                and m.round_index == round_index and m.layer == layer]
        if not hits:
            raise KeyError(f"no {step} message of {party_id} in round {round_index} (layer {layer})")
        return hits[-1]

    def projection(self, *, party_id: str, round_index: int, layer: int) -> np.ndarray:
        """Y_p^k as the party uploaded it."""
        return np.asarray(self.find(party_id=party_id, step="projection", round_index=round_index,
                                    layer=layer).payload)

    def others(self, *, party_id: str, round_index: int, layer: int) -> np.ndarray:
        """The relayed sum of the other parties' projections the party received."""
        return np.asarray(self.find(party_id=party_id, step="others", round_index=round_index, layer=layer).payload)

    def upload(self, *, party_id: str, round_index: int) -> GradientUpload:
        """The party's gradient upload."""
        payload = self.find(party_id=party_id, step="finish", round_index=round_index).payload
        assert isinstance(payload, GradientUpload)
        return payload


def _frozen(value: object) -> object:
    """A copy the sender cannot change afterwards (arrays and uploads are copied deeply)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return copy.deepcopy(value)


class RecordingLink:
    """PartyLink decorator: forwards every call to `inner` and logs what went each way."""

    def __init__(self, inner: PartyLink, log: MessageLog) -> None:
        self.inner, self.log = inner, log

    @property
    def party_id(self) -> str:
        """Id of the party behind the link."""
        return self.inner.party_id

    def _add(self, step: Step, round_index: int, attempt: int, layer: int | None, direction: Literal["up", "down"],
             payload: object) -> None:
        self.log.add(Message(self.party_id, round_index, attempt, step, layer, direction, payload))

    def begin(self, *, round_index: int, attempt: int, public: Mapping[str, np.ndarray]) -> None:
        """Log the public parameters sent down, then forward."""
        self._add("begin", round_index, attempt, None, "down", {k: np.asarray(v) for k, v in public.items()})
        self.inner.begin(round_index=round_index, attempt=attempt, public=public)

    def projection(self, *, round_index: int, attempt: int, layer: int) -> np.ndarray:
        """Forward, then log the projection sent up."""
        out = self.inner.projection(round_index=round_index, attempt=attempt, layer=layer)
        self._add("projection", round_index, attempt, layer, "up", out)
        return out

    def others(self, *, round_index: int, attempt: int, layer: int, others: np.ndarray) -> None:
        """Log the relayed sum sent down, then forward."""
        self._add("others", round_index, attempt, layer, "down", others)
        self.inner.others(round_index=round_index, attempt=attempt, layer=layer, others=others)

    def finish(self, *, round_index: int, attempt: int) -> GradientUpload:
        """Forward, then log the gradient upload sent up."""
        out = self.inner.finish(round_index=round_index, attempt=attempt)
        self._add("finish", round_index, attempt, None, "up", out)
        return out


def record(federation: InProcessFederation, *, keep: Callable[[Message], bool] | None = None) -> MessageLog:
    """Wrap every link of an in-process federation in a RecordingLink; returns the shared log."""
    log = MessageLog(keep=keep) if keep is not None else MessageLog()
    federation.links = {name: RecordingLink(link, log) for name, link in federation.links.items()}
    return log
