"""Serving fan-out: every enabled party's top-K for a user, merged into one list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from services.coordinator import registry
from services.coordinator.client import PartyClient, TrafficCounter
from services.errors import DomainError, NotFound, PartyUnavailable
from services.federation.fanout import fan_out

if TYPE_CHECKING:
    from services.coordinator.runner import RunManager


def merged_recommendations(*, session: Session, manager: RunManager, user_id: str, k: int) -> dict[str, Any]:
    """Top-k over all parties; 404 when no party knows the user, 502 when none could answer.

    The enabled parties are asked at once, each with the `fanout_timeout_s` deadline; the answer merges
    whoever answered, lists the others in "unavailable" and is flagged "partial" when that list is not empty.
    """
    counter = TrafficCounter()
    deadline = manager.settings.fanout_timeout_s
    clients = {p.party_id: PartyClient(p, http=manager.http, counter=counter, timeout_s=deadline, max_retries=0)
               for p in registry.list_parties(session=session) if p.enabled}

    def ask(c: PartyClient) -> dict[str, Any] | str | None:
        """The party's top-k; None when it does not know the user; a reason when it refused."""
        try:
            return c.recommendations(user_id=user_id, k=k)
        except NotFound:
            return None
        except PartyUnavailable:
            raise
        except DomainError as exc:  # it answered (e.g. no model published yet): listed, not "unavailable"
            return exc.code  # the code only: a party's error detail is not the app's to read

    answers, failures = fan_out(manager._pool, clients, ask, deadline_s=deadline)
    # "code: detail" -> code: a party's host names and error details are not the app's to read.
    failures = {pid: reason.split(":", 1)[0] for pid, reason in failures.items()}
    items: list[dict[str, Any]] = []
    unknown = 0
    for pid, body in answers.items():
        if body is None:
            unknown += 1
        elif isinstance(body, str):
            failures[pid] = body
        else:
            items += [{"party_id": pid, "item_id": it["item_id"], "score": it["score"], "fallback": body["fallback"]}
                      for it in body["items"]]
    if not answers and failures:
        raise PartyUnavailable(f"no party answered: {failures}")
    if unknown and unknown == len(answers) and not failures:
        raise NotFound(f"user {user_id!r} is unknown to every party", extra={"field": "user_id"})
    # Predicted ratings rank above popularity counts, which are on another scale.
    items.sort(key=lambda it: (it["fallback"] is not None, -it["score"]))
    return {"user_id": user_id, "items": items[:k], "unavailable": failures, "partial": bool(failures)}
