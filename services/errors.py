"""Domain errors; each API maps them to HTTP status codes in one place, every client maps them back.

`raise_for(status, body)` is the client half: the one place where an HTTP error answer (from a
party, the coordinator or the social party) becomes the DomainError it stands for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class DomainError(Exception):
    """Base class of every error the services raise on purpose."""

    code: str = "domain_error"
    # The status an HTTP adapter answers with; both APIs read it, so the mapping lives in one place.
    http_status: int = 400

    def __init__(self, detail: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra or {}


class NotFound(DomainError):
    """A resource (user, item, run, party) does not exist."""

    code = "not_found"
    http_status = 404


class Conflict(DomainError):
    """The request conflicts with the current state (run already running, budget spent)."""

    code = "conflict"
    http_status = 409


class ReleaseMismatch(Conflict):
    """A party serves another release than the one the caller expects."""

    code = "release_mismatch"


class ValidationFailed(DomainError):
    """Input is malformed; `extra` names the row/field and the reason."""

    code = "validation_failed"
    http_status = 422


class ProtocolError(DomainError):
    """A federation message is out of protocol (version, run id, round, shape)."""

    code = "protocol_error"
    http_status = 409


class CryptoError(DomainError):
    """A cryptographic check failed (key size, ciphertext range)."""

    code = "crypto_error"
    http_status = 422


class PrivacyBudgetExhausted(Conflict):
    """The (epsilon, delta) budget of a mechanism is spent."""

    code = "privacy_budget_exhausted"


class PolicyRefused(DomainError):
    """The request is well-formed but this party's own policy forbids it (e.g. noise-free products)."""

    code = "policy_refused"
    http_status = 403


class PartyUnavailable(DomainError):
    """A party did not answer (timeout, connection refused, 5xx)."""

    code = "party_unavailable"
    http_status = 502


# Every error class a peer may name in its body's "code"; the most specific class wins.
_BY_CODE: dict[str, type[DomainError]] = {
    cls.code: cls
    for cls in (NotFound, Conflict, ReleaseMismatch, ValidationFailed, ProtocolError, CryptoError, PrivacyBudgetExhausted,
                PolicyRefused, PartyUnavailable)
}
# When the body names no known code, the status decides.
_BY_STATUS: dict[int, type[DomainError]] = {
    400: ValidationFailed, 401: PolicyRefused, 403: PolicyRefused, 404: NotFound, 408: PartyUnavailable,
    409: Conflict, 410: NotFound, 413: ValidationFailed, 415: ValidationFailed, 422: ValidationFailed,
    429: PartyUnavailable,
}


def _body(body: object) -> dict[str, Any]:
    """A JSON error body as a dict; anything else becomes {"detail": <its text>}."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except ValueError:  # not JSON (a proxy's HTML page, a plain-text 502)
            body = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    if isinstance(body, Mapping):
        return dict(body)
    return {"detail": "" if body is None else str(body)[:300]}


def error_for(status: int, body: object, *, source: str = "",
              extra: Mapping[str, Any] | None = None) -> DomainError | None:
    """The domain error an HTTP answer stands for (None below 400); `source` prefixes the detail.

    The body (bytes, text or parsed JSON) is read as `{code, detail, ...}`: a known `code` picks the
    class (so a 409 `privacy_budget_exhausted` stays that), else the status does; 5xx is always
    PartyUnavailable. The body's other fields (and `extra`) become the error's `extra`, so a peer's
    `field`, `errors` or own `code` survive the hop.
    """
    if status < 400:
        return None
    fields = _body(body)
    detail = str(fields.pop("detail", "") or f"HTTP {status}")
    if source:
        detail = f"{source}: {detail}"
    fields.update(extra or {})
    cls = (PartyUnavailable if status >= 500
           else _BY_CODE.get(str(fields.get("code", "")), _BY_STATUS.get(status, ProtocolError)))
    if fields.get("code") == cls.code:
        del fields["code"]
    return cls(detail, extra=fields)


def raise_for(status: int, body: object, *, source: str = "", extra: Mapping[str, Any] | None = None) -> None:
    """Raise the domain error an HTTP error answer stands for; return quietly below 400."""
    error = error_for(status, body, source=source, extra=extra)
    if error is not None:
        raise error
