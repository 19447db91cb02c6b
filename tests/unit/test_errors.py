"""raise_for: every client turns an HTTP error answer into the domain error it stands for."""

from __future__ import annotations

import json

import pytest

from services.errors import (
    Conflict,
    CryptoError,
    DomainError,
    NotFound,
    PartyUnavailable,
    PolicyRefused,
    PrivacyBudgetExhausted,
    ProtocolError,
    ValidationFailed,
    error_for,
    raise_for,
)


@pytest.mark.parametrize(
    "status, code, expected",
    [
        (404, "not_found", NotFound),
        (404, None, NotFound),
        (409, "conflict", Conflict),
        (409, "protocol_error", ProtocolError),
        (409, "privacy_budget_exhausted", PrivacyBudgetExhausted),
        (409, "model_not_ready", Conflict),
        (409, None, Conflict),
        (422, "validation_failed", ValidationFailed),
        (422, "crypto_error", CryptoError),
        (413, "payload_too_large", ValidationFailed),
        (415, "unsupported_media_type", ValidationFailed),
        (400, None, ValidationFailed),
        (403, "policy_refused", PolicyRefused),
        (403, "forbidden", PolicyRefused),
        (401, "unauthorized", PolicyRefused),
        (405, "method_not_allowed", ProtocolError),
        (429, None, PartyUnavailable),
        (500, None, PartyUnavailable),
        (502, "party_unavailable", PartyUnavailable),
        (503, "not_found", PartyUnavailable),  # 5xx is transient whatever the body says
    ],
)
def test_each_status_and_code_maps_to_its_error(status: int, code: str | None, expected: type[DomainError]) -> None:
    body = {"detail": "why"} | ({"code": code} if code else {})
    with pytest.raises(DomainError) as caught:
        raise_for(status, json.dumps(body).encode())
    assert type(caught.value) is expected
    assert caught.value.detail == "why" and caught.value.http_status == expected.http_status


@pytest.mark.parametrize("status", [200, 201, 202, 204, 302, 399])
def test_success_raises_nothing(status: int) -> None:
    raise_for(status, b"")
    assert error_for(status, {"code": "not_found", "detail": "x"}) is None


def test_body_fields_survive_the_hop() -> None:
    body = {"code": "validation_failed", "detail": "bad", "field": "rating",
            "errors": [{"row": 3, "field": "rating", "reason": "9.0 outside [1.0, 5.0]"}]}
    err = error_for(422, body, source="party p1", extra={"party_id": "p1"})
    assert isinstance(err, ValidationFailed) and err.detail == "party p1: bad"
    # the class already says validation_failed; the rest of the body and the caller's extra stay
    assert err.extra == {"field": "rating", "errors": body["errors"], "party_id": "p1"}


def test_a_peer_code_the_class_does_not_carry_is_kept() -> None:
    """A Conflict answered as `model_not_ready` is re-rendered with that code (extra["code"] wins)."""
    err = error_for(409, {"code": "model_not_ready", "detail": "no model"})
    assert isinstance(err, Conflict) and err.code == "conflict" and err.extra == {"code": "model_not_ready"}
    budget = error_for(409, {"code": "privacy_budget_exhausted", "detail": "spent", "epsilon_total": 20.0})
    assert isinstance(budget, PrivacyBudgetExhausted) and budget.extra == {"epsilon_total": 20.0}


@pytest.mark.parametrize(
    "body, detail",
    [
        (b"<html>bad gateway</html>", "<html>bad gateway</html>"),
        ("plain text", "plain text"),
        (b"\xff\xfe", "\ufffd\ufffd"),
        (b"[1, 2]", "[1, 2]"),
        (None, "HTTP 404"),
        (b"", "HTTP 404"),
        ({"code": "not_found"}, "HTTP 404"),
    ],
)
def test_bodies_that_are_not_error_objects(body: object, detail: str) -> None:
    err = error_for(404, body)
    assert isinstance(err, NotFound) and err.detail == detail
