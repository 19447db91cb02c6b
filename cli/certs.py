"""`fedrec certs`: a development CA and role-specific certificates for a local federation (HTTPS + mutual TLS).

Each certificate does one job (its extended key usage says which, and TLS checks it):
- server certificates (serverAuth only) for the coordinator and each party; their SANs are the
  service's own name (its identity: the coordinator pins a party to it, `tls_name` at
  registration) and the hosts the services answer on;
- client certificates (clientAuth only; SAN: the holder's name) for the coordinator as a client
  of the parties (`coordinator-client`) and for the operator (`operator`: CLI, scripts, apps).
A client certificate cannot serve as a party, and one party's certificate cannot pass for another
pinned party's. For development and tests only: real certificates come from the organizations' CAs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
COORDINATOR_CLIENT = "coordinator-client"
OPERATOR = "operator"
Role = Literal["server", "client"]


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """PEM files NAME.crt and NAME.key (key readable by the owner only)."""
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key.chmod(0o600)
        return cert, key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedrec development"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(common_name: str = "fedrec development CA") -> Issued:
    """A self-signed CA certificate (P-256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Issued(key, cert)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(ca: Issued, common_name: str, hosts: list[str], *, role: Role) -> Issued:
    """A certificate for one role: a server (SANs: `common_name` and `hosts`) or a client (SAN: `common_name`)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    names = list(dict.fromkeys([common_name, *hosts])) if role == "server" else [common_name]
    usage = ExtendedKeyUsageOID.SERVER_AUTH if role == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    return Issued(key, cert)


def federation_certs(out: Path, *, parties: list[str], hosts: list[str],
                     clients: list[str] | None = None) -> dict[str, tuple[Path, Path]]:
    """Under `out`: ca.crt (+ ca.key); server certificates coordinator and each party; client certificates
    coordinator-client, operator and each extra client. Returns {name: (cert, key)}."""
    client_names = list(dict.fromkeys([COORDINATOR_CLIENT, OPERATOR, *(clients or [])]))
    servers = ["coordinator", *parties]
    names = ["ca", *servers, *client_names]
    if len(set(names)) != len(names):
        raise ValueError(f"party and client names must be distinct and none of ca, coordinator, {COORDINATOR_CLIENT}, "
                         f"{OPERATOR}: parties {parties}, clients {clients or []}")
    ca = make_ca()
    files = {"ca": ca.write(out, "ca")}
    for name in servers:
        files[name] = issue(ca, name, hosts, role="server").write(out, name)
    for name in client_names:
        files[name] = issue(ca, name, [], role="client").write(out, name)
    return files


def certs(
    out: Annotated[Path, typer.Option(help="directory for the PEM files")] = Path("var/certs"),
    party: Annotated[list[str], typer.Option(help="a party id (repeat); default: party1..party3")] = [],  # noqa: B006
    host: Annotated[list[str], typer.Option(help="a host name or IP the services answer on (repeat)")] = [],  # noqa: B006
) -> None:
    """Create a development CA, server certificates (coordinator, each party) and client certificates
    (the coordinator's, the operator's) for mutual TLS."""
    parties = party or ["party1", "party2", "party3"]
    try:
        files = federation_certs(out, parties=parties, hosts=host or ["localhost", "127.0.0.1"])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    ca = files["ca"][0]
    typer.echo(f"CA: {ca}")
    for name in ["coordinator", *parties, COORDINATOR_CLIENT, OPERATOR]:
        cert, key = files[name]
        typer.echo(f"{name} ({'client' if name in (COORDINATOR_CLIENT, OPERATOR) else 'server'}): {cert} {key}")
    typer.echo("party:       PARTY_TLS_CERT_FILE=<party>.crt PARTY_TLS_KEY_FILE=<party>.key "
               f"PARTY_TLS_CLIENT_CA_FILE={ca}")
    client_cert, client_key = files[COORDINATOR_CLIENT]
    typer.echo(f"coordinator: COORD_PARTY_CA_FILE={ca} COORD_CLIENT_CERT_FILE={client_cert} "
               f"COORD_CLIENT_KEY_FILE={client_key} COORD_TLS_CERT_FILE={files['coordinator'][0]} "
               f"COORD_TLS_KEY_FILE={files['coordinator'][1]} (COORD_TLS_CLIENT_CA_FILE={ca}: require client certificates)")
    typer.echo("register:    fedrec coordinator register-party <party> https://<host>:<port> --tls-name <party>")
    typer.echo(f"operator:    fedrec ... --ca-file {ca} --cert-file {files[OPERATOR][0]} --key-file {files[OPERATOR][1]}")


def register(app: typer.Typer) -> None:
    """Add the `certs` command."""
    app.command("certs")(certs)
