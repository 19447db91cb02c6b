"""`fedrec certs`: a development CA and certificates for a local federation (HTTPS + mutual TLS).

Every service gets one certificate usable as server and client (SAN: the given hosts), signed by a
fresh CA: parties serve with theirs and require client certificates from the CA; the coordinator
serves with its own and presents it to the parties. For development and tests only: a real
deployment's certificates come from the organizations' own CAs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365


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


def issue(ca: Issued, common_name: str, hosts: list[str]) -> Issued:
    """A certificate for one service, valid as TLS server (for `hosts`) and as TLS client."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca.key, hashes.SHA256()))
    return Issued(key, cert)


def federation_certs(out: Path, *, parties: list[str], hosts: list[str],
                     clients: list[str] | None = None) -> dict[str, tuple[Path, Path]]:
    """ca.crt (+ ca.key) and NAME.crt/NAME.key for the coordinator, each party and each extra client under `out`."""
    ca = make_ca()
    files = {"ca": ca.write(out, "ca")}
    for name in ["coordinator", *parties, *(clients or [])]:
        files[name] = issue(ca, name, hosts).write(out, name)
    return files


def certs(
    out: Annotated[Path, typer.Option(help="directory for the PEM files")] = Path("var/certs"),
    party: Annotated[list[str], typer.Option(help="a party id (repeat); default: party1..party3")] = [],  # noqa: B006
    host: Annotated[list[str], typer.Option(help="a host name or IP the services answer on (repeat)")] = [],  # noqa: B006
) -> None:
    """Create a development CA and certificates for the coordinator and each party (mutual TLS)."""
    parties = party or ["party1", "party2", "party3"]
    files = federation_certs(out, parties=parties, hosts=host or ["localhost", "127.0.0.1"])
    typer.echo(f"CA: {files['ca'][0]}")
    for name in ["coordinator", *parties]:
        cert, key = files[name]
        typer.echo(f"{name}: {cert} {key}")
    typer.echo("party:       PARTY_TLS_CERT_FILE=<party>.crt PARTY_TLS_KEY_FILE=<party>.key "
               f"PARTY_TLS_CLIENT_CA_FILE={files['ca'][0]}")
    typer.echo(f"coordinator: COORD_PARTY_CA_FILE={files['ca'][0]} COORD_CLIENT_CERT_FILE={files['coordinator'][0]} "
               f"COORD_CLIENT_KEY_FILE={files['coordinator'][1]} (and COORD_TLS_CERT_FILE/KEY_FILE to serve HTTPS)")


def register(app: typer.Typer) -> None:
    """Add the `certs` command."""
    app.command("certs")(certs)
