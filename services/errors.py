"""Domain errors; each API maps them to HTTP status codes in one place."""

from __future__ import annotations

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
