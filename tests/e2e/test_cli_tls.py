"""The CLI over HTTPS and mutual TLS: --ca-file/--cert-file/--key-file (or FEDREC_* variables) reach a party
that requires client certificates and a coordinator on HTTPS; without them, one line says what to check."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.certs import federation_certs
from cli.localfed import ADMIN as COORD_ADMIN
from cli.main import app
from coordinator_api.main import create_app as coordinator_app
from party_api.main import create_app as party_app
from services.db.session import migrate, upgrade
from tests.support.federation import coordinator_settings
from tests.support.party import ADMIN, party_settings
from tests.support.servers import LiveServer

Files = dict[str, tuple[Path, Path]]


def _server_options(files: Files, name: str, *, client_ca: bool) -> dict[str, object]:
    options: dict[str, object] = {"ssl_certfile": str(files[name][0]), "ssl_keyfile": str(files[name][1])}
    if client_ca:
        options |= {"ssl_ca_certs": str(files["ca"][0]), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    context = ssl.create_default_context(cafile=str(files["ca"][0]))
    context.load_cert_chain(str(files["operator"][0]), str(files["operator"][1]))
    return options | {"client_verify": context}


@pytest.fixture
def certs(tmp_path: Path) -> Files:
    return federation_certs(tmp_path / "certs", parties=["p1"], hosts=["localhost", "127.0.0.1"], clients=["operator"])


@pytest.fixture
def mtls_party(tmp_path: Path, certs: Files) -> Iterator[str]:
    """A party on HTTPS that refuses clients without a certificate from the development CA."""
    db = f"sqlite:///{tmp_path / 'party.db'}"
    migrate(db)
    server = LiveServer(party_app(party_settings(db)), **_server_options(certs, "p1", client_ca=True)).start()
    yield server.url
    server.stop()


def _cli(args: list[str], **env: str | None) -> tuple[int, str]:
    clean = {"FEDREC_CA_FILE": None, "FEDREC_CERT_FILE": None, "FEDREC_KEY_FILE": None, "SSL_CERT_FILE": None}
    result = CliRunner().invoke(app, args, env={**clean, **env})
    return result.exit_code, result.output


def test_ingest_and_evaluation_split_into_a_mutual_tls_party(mtls_party: str, certs: Files, tmp_path: Path) -> None:
    data = tmp_path / "ratings.csv"
    data.write_text("user_id,item_id,rating\n1,2,3\n2,2,4\n")
    ca, (cert, key) = str(certs["ca"][0]), (str(p) for p in certs["operator"])
    ingest = ["party", "ingest", str(data), "--url", mtls_party, "--token", ADMIN]
    code, output = _cli([*ingest, "--ca-file", ca, "--cert-file", cert, "--key-file", key])
    assert code == 0 and '"rows": 2' in output, output
    # The same through the environment, as an operator's shell profile would set it.
    env = {"FEDREC_CA_FILE": ca, "FEDREC_CERT_FILE": cert, "FEDREC_KEY_FILE": key}
    code, output = _cli(["party", "evaluation-split", str(data), "--url", mtls_party, "--token", ADMIN], **env)
    assert code == 0 and '"test": 2' in output, output

    code, output = _cli([*ingest, "--ca-file", ca])  # no client certificate: refused at the handshake
    assert code == 1 and output.count("\n") == 1 and "Traceback" not in output
    # TLS 1.3: the party either alerts (certificate required) or drops the connection; both name the fix.
    assert output.startswith((f"error {mtls_party} refused the TLS client certificate",
                              f"error {mtls_party} closed the connection")), output
    assert "check --cert-file and --key-file" in output
    code, output = _cli([*ingest])  # the system's CAs do not know the development CA
    assert code == 1 and output.count("\n") == 1
    assert output.startswith(f"error TLS with {mtls_party} failed (certificate verify failed): check --ca-file"), output
    code, output = _cli([*ingest, "--ca-file", ca, "--cert-file", str(certs["ca"][0]), "--key-file", key])
    assert code == 1 and output.startswith("error cannot load the TLS files") and output.count("\n") == 1, output


def test_coordinator_commands_over_https(tmp_path: Path, certs: Files) -> None:
    db = f"sqlite:///{tmp_path / 'coordinator.db'}"
    upgrade(db, environment="coordinator")
    options = _server_options(certs, "coordinator", client_ca=False)
    server = LiveServer(coordinator_app(coordinator_settings(db)), **options).start()
    try:
        base = ["coordinator", "parties", "--url", server.url, "--token", COORD_ADMIN]
        assert _cli([*base, "--ca-file", str(certs["ca"][0])]) == (0, "no parties registered\n")
        code, output = _cli(base)
        assert code == 1 and "certificate verify failed" in output and output.count("\n") == 1
    finally:
        server.stop()
