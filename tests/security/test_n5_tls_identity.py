"""N5: a party's TLS identity is pinned at registration and checked in every handshake, before the credential
is sent; certificates have one role each; a TLS coordinator refuses http:// parties; its own API can require
client certificates (COORD_TLS_CLIENT_CA_FILE)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from fastapi import FastAPI, Request

from cli.certs import COORDINATOR_CLIENT, OPERATOR, federation_certs
from cli.localfed import ADMIN, LocalTLS, coordinator_proc
from coordinator_api.main import create_app as coordinator_app
from services.config import CoordinatorSettings
from services.coordinator.client import PartyClient, TrafficCounter, party_http_client
from services.coordinator.fanout import ServingFanout
from services.coordinator.registry import PartyEndpoint
from services.db.session import upgrade
from services.errors import PartyUnavailable
from tests.support.federation import coordinator_settings
from tests.support.servers import LiveServer, live_server

TOKEN = "the-coordinator-credential-for-p0-0123456789"
Files = dict[str, tuple[Path, Path]]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return federation_certs(tmp_path_factory.mktemp("certs"), parties=["p0", "p1"], hosts=["localhost", "127.0.0.1"])


class Impostor:
    """An HTTPS server with a certificate from the federation's CA that records every credential it receives."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        self.credentials: list[str | None] = []
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def anything(request: Request) -> dict[str, str]:
            self.credentials.append(request.headers.get("authorization"))
            return {}

        self.server = LiveServer(app, ssl_certfile=str(cert[0]), ssl_keyfile=str(cert[1]))


@pytest.fixture
def impostor(request: pytest.FixtureRequest, files: Files) -> Iterator[Impostor]:
    fake = Impostor(files[request.param])
    fake.server.start()
    try:
        yield fake
    finally:
        fake.server.stop()


def _settings(files: Files) -> CoordinatorSettings:
    return coordinator_settings("sqlite://", party_ca_file=files["ca"][0], client_cert_file=files[COORDINATOR_CLIENT][0],
                                client_key_file=files[COORDINATOR_CLIENT][1])


def _http(files: Files) -> httpx.Client:
    """The coordinator's HTTP client to parties, with its TLS settings."""
    return party_http_client(_settings(files))


def _serve(files: Files, url: str, tls_name: str | None) -> None:
    """The serving fan-out's own client (recommendations, predictions, erasure) calling the same party."""
    fanout = ServingFanout(settings=_settings(files))
    try:
        fanout.call(PartyEndpoint("p0", url, TOKEN, "ratings", True, tls_name), "GET", "/v1/users/u1/recommendations",
                    timeout_s=10)
    finally:
        fanout.close()


def _call(files: Files, url: str, tls_name: str | None, *, http: httpx.Client | None = None,
          party_id: str = "p0") -> None:
    """The coordinator's party client calling a training step and serving, as a run and the fan-out do."""
    with _http(files) if http is None else httpx.Client() as own:
        client = PartyClient(PartyEndpoint(party_id, url, TOKEN, "ratings", True, tls_name), http=http or own,
                             counter=TrafficCounter(), timeout_s=10, max_retries=0)
        client.post_json("/v1/federation/runs/r1/configure", {"run_id": "r1", "config": {}, "seed": 0})
        client.get_json("/v1/users/u1/recommendations", headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.mark.parametrize("impostor", [OPERATOR, "p1"], indirect=True)
def test_a_server_with_another_certificate_of_the_ca_gets_no_credential(files: Files, impostor: Impostor) -> None:
    """p0 is pinned to its name: the operator's certificate (client-only) and party p1's (server, other name)
    are refused in the handshake, so not one request byte, and no credential, reaches the impostor."""
    with pytest.raises(PartyUnavailable):
        _call(files, impostor.server.url, "p0")
    with pytest.raises(PartyUnavailable):
        _serve(files, impostor.server.url, "p0")
    assert impostor.credentials == []


@pytest.mark.parametrize("impostor", [OPERATOR], indirect=True)
def test_a_client_certificate_cannot_serve_even_unpinned(files: Files, impostor: Impostor) -> None:
    with pytest.raises(PartyUnavailable):
        _call(files, impostor.server.url, None)  # the URL's host (localhost) is in no client certificate either
    assert impostor.credentials == []


@pytest.mark.parametrize("impostor", ["p1"], indirect=True)
def test_the_pin_is_what_refuses_a_sibling_party(files: Files, impostor: Impostor) -> None:
    """Control: the same server is reached when pinned to its own name, and (loopback SANs being shared by the
    development certificates) when not pinned at all: the pin, not chance, kept p0's credential from it."""
    _call(files, impostor.server.url, "p1")
    _call(files, impostor.server.url, None)
    _serve(files, impostor.server.url, "p1")
    assert impostor.credentials == [f"Bearer {TOKEN}"] * 5


@pytest.mark.parametrize("impostor", ["p1"], indirect=True)
def test_a_connection_verified_for_one_party_never_carries_another_partys_call(files: Files,
                                                                               impostor: Impostor) -> None:
    """Two parties registered at one origin: the keep-alive connection verified for p1 is not reused for p0."""
    with _http(files) as http:
        _call(files, impostor.server.url, "p1", http=http, party_id="p1")
        with pytest.raises(PartyUnavailable):
            _call(files, impostor.server.url, "p0", http=http)
    assert impostor.credentials == [f"Bearer {TOKEN}"] * 2


def test_certificates_have_one_role_and_distinct_names(files: Files) -> None:
    def read(name: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate(files[name][0].read_bytes())

    for name, usage in [("coordinator", ExtendedKeyUsageOID.SERVER_AUTH), ("p0", ExtendedKeyUsageOID.SERVER_AUTH),
                        ("p1", ExtendedKeyUsageOID.SERVER_AUTH), (COORDINATOR_CLIENT, ExtendedKeyUsageOID.CLIENT_AUTH),
                        (OPERATOR, ExtendedKeyUsageOID.CLIENT_AUTH)]:
        cert = read(name)
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [usage]
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName)[0] == name
    assert "localhost" not in read(OPERATOR).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


def test_a_tls_coordinator_registers_https_parties_only(tmp_path: Path, files: Files) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    for dev, expected in ((False, 422), (True, 201)):
        url = f"sqlite:///{tmp_path / f'coordinator-{dev}.db'}"
        upgrade(url, environment="coordinator")
        settings = coordinator_settings(url, party_ca_file=files["ca"][0], dev_mode=dev)
        with live_server(coordinator_app(settings)) as live, httpx.Client(timeout=30) as http:
            answer = http.post(f"{live.url}/v1/parties", headers=headers,
                               json={"party_id": "p0", "url": "http://127.0.0.1:9", "token": TOKEN})
            assert answer.status_code == expected, answer.text
            if not dev:
                assert answer.json()["field"] == "url" and "https://" in answer.json()["detail"]
                pinned = http.post(f"{live.url}/v1/parties", headers=headers, json={
                    "party_id": "p0", "url": "https://127.0.0.1:9", "token": TOKEN, "tls_name": "p0"})
                assert pinned.status_code == 201 and pinned.json()["tls_name"] == "p0"
                moved = http.patch(f"{live.url}/v1/parties/p0", headers=headers, json={"url": "http://127.0.0.1:9"})
                assert moved.status_code == 422 and moved.json()["field"] == "url"
            else:
                bad = http.patch(f"{live.url}/v1/parties/p0", headers=headers, json={"tls_name": "p0"})
                assert bad.status_code == 422 and bad.json()["field"] == "tls_name"  # a pin needs https


@pytest.mark.slow
def test_the_coordinator_api_can_require_client_certificates(tmp_path: Path, files: Files) -> None:
    tls = LocalTLS(files)
    coord = coordinator_proc(tmp_path, tls=tls, extra_env={"COORD_TLS_CLIENT_CA_FILE": str(tls.ca)})
    try:
        coord.start(timeout=60)  # /health answers the operator's client certificate
        bare_context = ssl.create_default_context(cafile=str(tls.ca))
        with pytest.raises(httpx.TransportError), httpx.Client(verify=bare_context) as bare:
            bare.get(f"{coord.url}/health")
        with httpx.Client(verify=tls.client_context()) as operator:
            parties = operator.get(f"{coord.url}/v1/parties", headers={"Authorization": f"Bearer {ADMIN}"})
            assert parties.status_code == 200
    finally:
        coord.stop()
