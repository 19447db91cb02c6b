"""Mutual TLS between coordinator and parties: a federation round and a serving call over HTTPS with client
certificates made in the test, each party pinned to its own certificate's name; a client without a
certificate, or with one from another CA, is refused."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from cli.certs import COORDINATOR_CLIENT, OPERATOR, federation_certs, issue, make_ca
from cli.localfed import API_KEY
from tests.support.federation import TINY_CONFIG, federation


def _client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


@pytest.mark.slow
def test_federation_and_serving_over_mutual_tls(tmp_path: Path) -> None:
    files = federation_certs(tmp_path / "certs", parties=["p0", "p1"], hosts=["localhost", "127.0.0.1"])
    ca = files["ca"][0]

    def server(pid: str) -> dict[str, object]:  # each party serves with its own certificate
        return {"ssl_certfile": str(files[pid][0]), "ssl_keyfile": str(files[pid][1]), "ssl_ca_certs": str(ca),
                "ssl_cert_reqs": ssl.CERT_REQUIRED, "client_verify": _client_context(ca, *files[OPERATOR])}

    coordinator = {"party_ca_file": ca, "client_cert_file": files[COORDINATOR_CLIENT][0],
                   "client_key_file": files[COORDINATOR_CLIENT][1]}
    with federation(tmp_path, n_parties=2, server=server, **coordinator) as fed:
        party_url = fed.parties["p0"].url
        assert party_url.startswith("https://")
        for pid, live in fed.parties.items():
            fed.client.register(pid, live.url, tls_name=pid)  # pinned: TLS checks the certificate names pid
        run = fed.client.create_run(rounds=1, min_parties=2, seed=0, config=TINY_CONFIG)
        status = fed.client.wait(run["run_id"], timeout=180)
        assert status["state"] == "completed", status
        answer = fed.http.get(f"{fed.coordinator.url}/v1/users/user-1/recommendations",
                              headers={"X-API-Key": API_KEY})
        assert answer.status_code == 200 and answer.json()["items"] and not answer.json()["unavailable"]
        assert answer.json()["partial"] is False

        # Refused at the handshake, before any token is looked at.
        with pytest.raises(httpx.TransportError), httpx.Client(verify=_client_context(ca)) as bare:
            bare.get(f"{party_url}/health")
        stranger_ca = make_ca("another CA")
        stranger = issue(stranger_ca, "stranger", [], role="client").write(tmp_path / "stranger", "client")
        with pytest.raises(httpx.TransportError), httpx.Client(verify=_client_context(ca, *stranger)) as other:
            other.get(f"{party_url}/health")
        with httpx.Client(verify=_client_context(ca, *files[COORDINATOR_CLIENT])) as trusted:
            assert trusted.get(f"{party_url}/health").status_code == 200
        # Server certificates are checked too: a client trusting only the system's CAs refuses the party.
        with pytest.raises(httpx.TransportError), httpx.Client(verify=ssl.create_default_context()) as system:
            system.get(f"{party_url}/health")  # the system's CAs do not know the development CA
