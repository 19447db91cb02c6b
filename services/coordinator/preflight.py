"""Pre-flight: before a run trains, every party it names is registered, enabled, reachable, accepts the
coordinator's credential, speaks its protocol version, can run the protocol and holds data.

Each check ends within the pre-flight deadline with a reason that says what to fix; the caller
leaves the failing parties out (and fails the run when fewer than min_parties remain).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor

import httpx

from services.coordinator.client import PartyClient, TrafficCounter
from services.coordinator.registry import PartyEndpoint
from services.errors import DomainError, PartyUnavailable, PolicyRefused, ProtocolError
from services.federation.fanout import fan_out
from services.protocol import PROTOCOL_VERSION


def _check(client: PartyClient, protocol: str) -> str:
    """'' when the party passes, else why not (one line, no secret)."""
    try:
        answer = client.preflight()
    except PartyUnavailable:
        return f"unreachable at {client.endpoint.url} (is it running? is the URL right?)"
    except PolicyRefused:
        return "refused the coordinator's credential (check the token registered for it)"
    except (ProtocolError, DomainError) as exc:
        if exc.http_status == 409:
            return f"speaks another federation protocol version (coordinator: {PROTOCOL_VERSION})"
        return f"answered the pre-flight with {exc.code}"
    if str(answer.get("party_id")) != client.party_id:
        return f"answers as {answer.get('party_id')!r}, registered as {client.party_id!r} (check its URL)"
    if protocol not in (answer.get("protocols") or []):
        return f"cannot run protocol {protocol!r} (its build runs {answer.get('protocols')})"
    if not answer.get("holds_data"):
        return "holds no data (ingest interactions first)"
    return ""


def check_parties(*, endpoints: Mapping[str, PartyEndpoint], party_ids: Sequence[str], http: httpx.Client,
                  protocol: str, timeout_s: float, pool: Executor | None) -> dict[str, str]:
    """Each named party → '' when it passed, else the reason it cannot take part (all checked at once)."""
    reasons: dict[str, str] = {}
    clients: dict[str, PartyClient] = {}
    counter = TrafficCounter()
    for pid in sorted(set(party_ids)):
        ep = endpoints.get(pid)
        if ep is None:
            reasons[pid] = "not registered"
        elif not ep.enabled:
            reasons[pid] = "disabled"
        else:
            clients[pid] = PartyClient(ep, http=http, counter=counter, timeout_s=timeout_s, max_retries=0)
    answers, failures = fan_out(pool, clients, lambda c: _check(c, protocol), deadline_s=timeout_s + 1.0)
    reasons.update(answers)
    reasons.update({p: f"no pre-flight answer within {timeout_s:g}s" for p in failures})
    return reasons
