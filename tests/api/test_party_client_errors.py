"""The coordinator's PartyClient against a live party: each refusal arrives as the error it is, not as a 409."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from cli.localfed import free_port
from services.coordinator.client import PartyClient, TrafficCounter
from services.coordinator.registry import PartyEndpoint
from services.errors import (
    Conflict,
    NotFound,
    PartyUnavailable,
    PolicyRefused,
    ProtocolError,
    ValidationFailed,
)
from services.federation.links import Step
from services.federation.messages import ConfigureRequest
from tests.support.party import COORDINATOR, Party

# Only the malformed bodies below spell paths: the client's typed methods cannot send them.
FED = "/v1/federation/runs"


def _client(url: str, token: str = COORDINATOR) -> PartyClient:
    return PartyClient(PartyEndpoint("p1", url, token, "ratings", True), http=httpx.Client(),
                       counter=TrafficCounter(), max_retries=0)


@pytest.fixture
def client(party: Party) -> Iterator[PartyClient]:
    """A client of the live party, presenting the coordinator credential."""
    c = _client(party.url)
    yield c
    c.http.close()


def test_a_party_404_is_not_found(client: PartyClient) -> None:
    with pytest.raises(NotFound) as caught:
        client.step(run_id="ghost", step=Step("finish", 0, 0), message={})
    err = caught.value
    assert err.http_status == 404 and "ghost" in err.detail
    assert err.extra["field"] == "run_id" and err.extra["party_id"] == "p1"


def test_a_party_422_is_validation_failed(client: PartyClient) -> None:
    with pytest.raises(ValidationFailed) as caught:  # the body lacks config and seed
        client.post_json(f"{FED}/r1/configure", {"run_id": "r1"})
    err = caught.value
    assert err.http_status == 422 and err.extra["field"] in ("config", "seed")
    assert {e["field"] for e in err.extra["errors"]} == {"config", "seed"}
    with pytest.raises(ValidationFailed) as bad_config:  # a domain 422, raised by the party's service
        client.configure(request=ConfigureRequest(run_id="r1", config={"dim": 0}, seed=0))
    assert bad_config.value.extra["field"] == "config"


def test_a_protocol_violation_is_still_a_protocol_error(client: PartyClient) -> None:
    with pytest.raises(ProtocolError) as caught:
        client.post_json(f"{FED}/r1/configure", {"run_id": "other", "config": {}, "seed": 0})
    assert caught.value.http_status == 409 and caught.value.extra["field"] == "run_id"


def test_serving_get_raises_what_the_party_answered(client: PartyClient) -> None:
    auth = {"Authorization": f"Bearer {COORDINATOR}"}
    with pytest.raises(Conflict) as caught:  # nothing published yet
        client.get_json("/v1/users/u1/recommendations", params={"k": 3}, headers=auth)
    assert caught.value.extra["code"] == "model_not_ready"


def test_a_wrong_credential_is_a_policy_refusal(party: Party) -> None:
    client = _client(party.url, token="not-the-coordinator")
    with pytest.raises(PolicyRefused) as caught:
        client.psi_start(run_id="r1")
    assert caught.value.extra["code"] == "forbidden"
    client.http.close()


def test_an_unreachable_party_is_unavailable() -> None:
    client = _client(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(PartyUnavailable):
        client.psi_start(run_id="r1")
    with pytest.raises(PartyUnavailable):
        client.get_json("/v1/users/u1/recommendations")
    client.http.close()
