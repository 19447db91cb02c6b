"""Serving fan-out: top-K, predictions and erasure asked of the parties at once, failures as data.

`ServingFanout` is the coordinator app's own (built in its lifespan, closed at shutdown): its HTTP
client and thread pool are apart from the training runner's, so serving traffic never waits behind
a round's steps, and a round never waits behind serving. User ids go to the parties in paths and
bodies only; nothing here logs them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from models.metrics import merge_order
from services.config import CoordinatorSettings
from services.coordinator import registry, releases
from services.coordinator.client import party_async_client, party_http_client, party_path, pinned
from services.coordinator.registry import PartyEndpoint
from services.coordinator.serving_view import ServingView
from services.errors import (
    Conflict,
    DomainError,
    NotFound,
    PartyUnavailable,
    ReleaseMismatch,
    ValidationFailed,
    raise_for,
)
from services.federation.fanout import fan_out
from services.protocol.tracing import REQUEST_ID_HEADER, current_request_id

T = TypeVar("T")
DISABLED = "party_disabled"  # the reason given for a registered party that is switched off
MODEL_NOT_READY = "model_not_ready"  # a party's code before its first release (services/party/serving_cache.py)


def _active_release(session: Session) -> str | None:
    """The active release: every party is asked for it (None before the first release: whatever it serves)."""
    row = releases.active(session=session)
    return None if row is None else row.release_id


def _check_release(body: dict[str, Any], release_id: str | None) -> dict[str, Any]:
    """A party's answer, refused as a mismatch when it comes from another release than the one asked for."""
    if release_id is not None and body.get("release_id") != release_id:
        raise ReleaseMismatch(f"answered from release {body.get('release_id')!r}, not {release_id!r}")
    return body


def party_code(exc: DomainError) -> str:
    """The code a party answered with: its own (e.g. model_not_ready) where it named one, else the error's."""
    own = exc.extra.get("code")
    return own if isinstance(own, str) and own else exc.code


def not_ready(answers: Mapping[str, Any]) -> None:
    """Answer 409 model_not_ready, as a party does, when every party that answered has no model yet."""
    if answers and all(a == MODEL_NOT_READY for a in answers.values()):
        raise Conflict("no model to serve yet: no party has one (complete a training run "
                       "first: fedrec coordinator create)", extra={"code": MODEL_NOT_READY})


MALFORMED = "malformed_answer"  # a party answered 2xx with a body that is not the route's answer


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _recommendations_ok(body: dict[str, Any]) -> bool:
    """A party's top-k answer has the shape merging reads (anything else is that party's fault, not the caller's)."""
    items = body.get("items")
    return (isinstance(items, list) and (body.get("fallback") is None or isinstance(body.get("fallback"), str))
            and "fallback" in body
            and all(isinstance(it, dict) and isinstance(it.get("item_id"), str) and _number(it.get("score"))
                    for it in items))


def _predictions_ok(body: dict[str, Any], asked: int) -> bool:
    """A party's predictions answer: one prediction per pair it did not skip, skipped rows within the request."""
    predictions, skipped = body.get("predictions"), body.get("skipped", [])
    if not isinstance(predictions, list) or not isinstance(skipped, list):
        return False
    if not all(isinstance(s, dict) and type(s.get("row")) is int and 0 <= s["row"] < asked
               and isinstance(s.get("field"), str) for s in skipped):
        return False
    if len({s["row"] for s in skipped}) != len(skipped) or len(predictions) + len(skipped) != asked:
        return False
    return all(isinstance(p, dict) and _number(p.get("rating"))
               and (p.get("fallback") is None or isinstance(p.get("fallback"), str)) for p in predictions)


def _answer(party: PartyEndpoint, resp: httpx.Response) -> dict[str, Any]:
    """A party's answer as a JSON object; 5xx → PartyUnavailable, 4xx → the domain error it names."""
    extra = {"party_id": party.party_id}
    if resp.status_code >= 500:
        raise PartyUnavailable(f"party {party.party_id} answered HTTP {resp.status_code}", extra=extra)
    raise_for(resp.status_code, resp.content, source=f"party {party.party_id}", extra=extra)
    try:
        body = resp.json() if resp.content else {}
    except ValueError:
        body = None
    if not isinstance(body, dict):  # a 2xx that is not a JSON object: that party is not serving properly
        raise PartyUnavailable(f"party {party.party_id} answered HTTP {resp.status_code} without a JSON object",
                               extra=extra)
    return body


def _code(reason: str) -> str:
    """"code: detail" -> code: a party's host names and error details are not the caller's to read."""
    return reason.split(":", 1)[0]


class ServingFanout:
    """The coordinator's serving calls to parties: its own clients and pool, `fanout_timeout_s` per read.

    The top-K, the route apps call most, runs on the event loop: the enabled parties and the active release
    come from `view` (cached, dropped on every change: services.coordinator.serving_view), and the parties
    are asked at once over one shared asynchronous client whose connections are kept alive.
    """

    def __init__(self, *, settings: CoordinatorSettings, http: httpx.Client | None = None,
                 workers: int = 32, sessions: sessionmaker[Session] | None = None) -> None:
        self.settings = settings
        self.deadline_s = settings.fanout_timeout_s
        # Erasure is a write at each party (a transaction and a WAL checkpoint), given the request timeout.
        self.erase_timeout_s = settings.request_timeout_s
        self.http = http or party_http_client(settings)  # one pool per pinned party name
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fedrec-serving")
        self.view = None if sessions is None else ServingView(sessions)
        if self.view is not None:
            self.view.watch(sessions)  # type: ignore[arg-type]
        self._async_http: httpx.AsyncClient | None = None  # made on first use, on the serving event loop

    def close(self) -> None:
        """Wait for calls in flight (each bounded by its timeout), then close the pool and the client."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()

    async def aclose(self) -> None:
        """Close the asynchronous client (its kept-alive connections)."""
        if self._async_http is not None:
            await self._async_http.aclose()
            self._async_http = None

    @staticmethod
    def _headers(party: PartyEndpoint) -> dict[str, str]:
        request_id = current_request_id()
        return {"Authorization": f"Bearer {party.token}", **({REQUEST_ID_HEADER: request_id} if request_id else {})}

    def call(self, party: PartyEndpoint, method: str, path: str, *, timeout_s: float,
             **kwargs: Any) -> dict[str, Any]:
        """One request with the coordinator's credential; no retry; 5xx or no answer → PartyUnavailable."""
        try:
            resp = self.http.request(method, f"{party.url}{path}", headers=self._headers(party), timeout=timeout_s,
                                     extensions=pinned(party), **kwargs)
        except httpx.TransportError as exc:
            raise PartyUnavailable(f"party {party.party_id} unavailable: {type(exc).__name__}",
                                   extra={"party_id": party.party_id}) from exc
        return _answer(party, resp)

    async def call_async(self, party: PartyEndpoint, method: str, path: str, *, timeout_s: float,
                         **kwargs: Any) -> dict[str, Any]:
        """`call` on the event loop, over the shared asynchronous client."""
        if self._async_http is None:
            self._async_http = party_async_client(self.settings)
        try:
            resp = await self._async_http.request(method, f"{party.url}{path}", headers=self._headers(party),
                                                  timeout=timeout_s, extensions=pinned(party), **kwargs)
        except httpx.TransportError as exc:
            raise PartyUnavailable(f"party {party.party_id} unavailable: {type(exc).__name__}",
                                   extra={"party_id": party.party_id}) from exc
        return _answer(party, resp)

    def ask(self, parties: dict[str, PartyEndpoint], call: Callable[[PartyEndpoint], T], *,
            deadline_s: float | None = None) -> tuple[dict[str, T], dict[str, str]]:
        """`call` on every party at once within the deadline; (answers, failure codes by party)."""
        answers, failures = fan_out(self.pool, parties, call, deadline_s=deadline_s or self.deadline_s)
        return answers, {pid: _code(reason) for pid, reason in failures.items()}

    async def ask_async(self, parties: dict[str, PartyEndpoint],
                        call: Callable[[PartyEndpoint], Awaitable[T]]) -> tuple[dict[str, T], dict[str, str]]:
        """`ask` on the event loop: every party at once, each within the deadline; failures as codes."""
        jobs = sorted(parties.items())
        done = await asyncio.gather(*(asyncio.wait_for(call(p), self.deadline_s) for _, p in jobs),
                                    return_exceptions=True)
        answers: dict[str, T] = {}
        failures: dict[str, str] = {}
        for (pid, _), result in zip(jobs, done):
            if isinstance(result, TimeoutError):  # no answer within the deadline
                failures[pid] = PartyUnavailable.code
            elif isinstance(result, DomainError):
                failures[pid] = result.code
            elif isinstance(result, Exception):  # a party's bad answer must not stop the others
                failures[pid] = type(result).__name__
            elif isinstance(result, BaseException):
                raise result  # cancelled: the caller went away
            else:
                answers[pid] = result
        return answers, failures

    # ---- the three serving operations -------------------------------------------------------
    async def recommendations(self, *, user_id: str, k: int) -> dict[str, Any]:
        """Top-k over all enabled parties; 404 when no party knows the user, 502 when none could answer.

        Whoever answered within the deadline from the active release is merged; the others are listed in
        "unavailable" (release_mismatch: it serves another release) and the answer is flagged "partial".
        """
        assert self.view is not None, "ServingFanout(sessions=...) serves top-K"
        directory = await self.view.get()
        release_id = directory.release_id
        params: dict[str, Any] = {"k": k, **({"release": release_id} if release_id else {})}
        path = party_path("v1", "users", user_id, "recommendations")

        async def one(party: PartyEndpoint) -> dict[str, Any] | str | None:
            """The party's top-k; None when it does not know the user; a code when it refused."""
            try:
                body = _check_release(await self.call_async(party, "GET", path, timeout_s=self.deadline_s,
                                                            params=params), release_id)
                return body if _recommendations_ok(body) else MALFORMED
            except NotFound:
                return None
            except PartyUnavailable:
                raise
            except DomainError as exc:  # it answered (e.g. no model published yet): listed, not "unavailable"
                return party_code(exc)

        answers, failures = await self.ask_async(directory.parties, one)
        not_ready(answers)
        return {**merge_recommendations(answers, failures, user_id=user_id, k=k), "release_id": release_id}

    def predictions(self, *, session: Session, pairs: list[tuple[str, str, str]]) -> dict[str, Any]:
        """Predicted ratings of (user, item, party) triples, each pair asked of the party it names only."""
        parties = {p.party_id: p for p in registry.list_parties(session=session)}
        rows: dict[str, list[int]] = {}
        for r, (_, _, pid) in enumerate(pairs):
            if pid not in parties:
                # the error dialect's row is 1-based, as for a body's own validation errors
                raise ValidationFailed(f"pair {r + 1}: party {pid!r} is not registered",
                                       extra={"field": "party_id", "row": r + 1})
            rows.setdefault(pid, []).append(r)
        release_id = _active_release(session)
        params = {"unknown": "skip", **({"release": release_id} if release_id else {})}

        def one(party: PartyEndpoint) -> dict[str, Any] | str:
            body = {"pairs": [{"user_id": pairs[r][0], "item_id": pairs[r][1]} for r in rows[party.party_id]]}
            try:
                answer = _check_release(self.call(party, "POST", "/v1/predictions", timeout_s=self.deadline_s,
                                                  params=params, json=body), release_id)
                return answer if _predictions_ok(answer, len(rows[party.party_id])) else MALFORMED
            except PartyUnavailable:
                raise
            except DomainError as exc:
                return party_code(exc)

        asked = {pid: parties[pid] for pid in rows if parties[pid].enabled}
        answers, failures = self.ask(asked, one)
        not_ready(answers)
        failures |= {pid: DISABLED for pid in rows if not parties[pid].enabled}
        return {**merge_predictions(pairs, rows, answers, failures), "release_id": release_id}

    def erase_user(self, *, session: Session, user_id: str) -> dict[str, Any]:
        """Erase a user at every enabled party (its DELETE /v1/users/{id}); the outcome per registered party."""
        def one(party: PartyEndpoint) -> dict[str, Any]:
            try:
                done = self.call(party, "DELETE", party_path("v1", "users", user_id), timeout_s=self.erase_timeout_s)
            except NotFound:
                return _outcome("unknown")
            except PartyUnavailable:
                raise
            except DomainError as exc:  # e.g. a concurrent upload (409, retryable) or a refused credential
                return _outcome("unavailable", party_code(exc))
            return _outcome("erased", interactions_deleted=int(done.get("interactions_deleted", 0)))

        parties = {p.party_id: p for p in registry.list_parties(session=session)}
        answers, failures = self.ask({pid: p for pid, p in parties.items() if p.enabled}, one,
                                     deadline_s=self.erase_timeout_s)
        outcomes = {pid: answers.get(pid) or _outcome("unavailable", failures.get(pid, DISABLED))
                    for pid in sorted(parties)}
        return {"user_id": user_id, "parties": outcomes,
                "complete": all(o["outcome"] != "unavailable" for o in outcomes.values())}


def _outcome(outcome: str, reason: str | None = None, *, interactions_deleted: int | None = None) -> dict[str, Any]:
    return {"outcome": outcome, "reason": reason, "interactions_deleted": interactions_deleted}


def merge_recommendations(answers: dict[str, dict[str, Any] | str | None], failures: dict[str, str], *,
                          user_id: str, k: int) -> dict[str, Any]:
    """The parties' top-k lists merged by score: model scores first (a party's served blend and its local EASE
    alone are both calibrated log-odds, one scale), popularity fallbacks after."""
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
    # Model scores (a party's served blend and its EASE alone: both calibrated log-odds) rank above popularity
    # counts, which are on another scale.
    order = merge_order(np.array([float(it["score"]) for it in items], dtype=np.float64), k,
                        demoted=np.array([it["fallback"] == "popularity" for it in items], dtype=bool))
    return {"user_id": user_id, "items": [items[i] for i in order.tolist()], "unavailable": failures,
            "partial": bool(failures)}


def merge_predictions(pairs: list[tuple[str, str, str]], rows: dict[str, list[int]],
                      answers: dict[str, dict[str, Any] | str], failures: dict[str, str]) -> dict[str, Any]:
    """One entry per requested pair, in request order: "ok", "unknown" (to its party) or "unavailable"."""
    out: list[dict[str, Any]] = [
        {"user_id": u, "item_id": i, "party_id": p, "status": "unavailable", "rating": None, "fallback": None,
         "reason": None, "score_kind": None} for u, i, p in pairs]
    for pid, body in answers.items():
        if isinstance(body, str):  # the party answered, but refused (e.g. no model published yet)
            failures[pid] = body
            continue
        mine = rows[pid]
        skipped = {int(s["row"]): str(s["field"]) for s in body.get("skipped", [])}
        known = iter(body["predictions"])
        for local, r in enumerate(mine):
            if local in skipped:
                out[r].update(status="unknown", reason=f"unknown_{skipped[local].removesuffix('_id')}")
            else:
                got = next(known)
                out[r].update(status="ok", rating=float(got["rating"]), fallback=got["fallback"],
                              score_kind=body.get("score_kind", "rating"))
    for pid, reason in failures.items():
        for r in rows[pid]:
            out[r]["reason"] = reason
    if not answers:
        raise PartyUnavailable(f"no party answered: {failures}")
    return {"predictions": out, "unavailable": failures, "partial": bool(failures)}
