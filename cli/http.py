"""The CLI's HTTP side, shared by every command that calls a service.

`service_client` builds the one kind of client the commands use (TLS and mutual TLS from --ca-file,
--cert-file, --key-file; the credential header); its transport turns a connection failure or a
refused credential into a `CliError` that names the URL and what to check. `@reported` gives a
command the TLS options and prints any CliError, error answer or settings error as one line (exit 1).
"""

from __future__ import annotations

import functools
import inspect
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
import pydantic
import typer
from rich.console import Console
from rich.markup import escape

from services.config import settings_message
from services.errors import DomainError, raise_for

err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A failure the operator can fix; its message is the one line the command prints."""


@dataclass(frozen=True)
class Tls:
    """Where the CLI finds the CA to trust and the client certificate to present (None: system CAs, no cert)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def verify(self) -> ssl.SSLContext | bool:
        """What httpx verifies the server with (and presents as client): True when nothing is set."""
        if self.key_file is not None and self.cert_file is None:
            raise CliError("--key-file needs --cert-file (FEDREC_CERT_FILE): a key alone is no client certificate")
        if self.ca_file is None and self.cert_file is None:
            return True
        try:
            context = (ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None
                       else httpx.create_ssl_context())
            if self.cert_file is not None:
                context.load_cert_chain(str(self.cert_file), None if self.key_file is None else str(self.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot load the TLS files ({_reason(exc)}): check --ca-file, --cert-file, --key-file "
                           "(PEM; the key must match the certificate)") from exc
        return context


TLS_OPTIONS = {
    "ca_file": Annotated[Path | None, typer.Option(
        "--ca-file", envvar="FEDREC_CA_FILE", exists=True, dir_okay=False,
        help="CA bundle (PEM) that signed the service's certificate (default: the system's CAs)")],
    "cert_file": Annotated[Path | None, typer.Option(
        "--cert-file", envvar="FEDREC_CERT_FILE", exists=True, dir_okay=False,
        help="client certificate (PEM) for services that require mutual TLS")],
    "key_file": Annotated[Path | None, typer.Option(
        "--key-file", envvar="FEDREC_KEY_FILE", exists=True, dir_okay=False,
        help="private key (PEM) of --cert-file")],
}


def _reason(exc: BaseException) -> str:
    """A short, secret-free reason: the OpenSSL reason or the OS error text, lower case."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    match = re.search(r"\[SSL: ([A-Z0-9_]+)\]", text) or re.search(r"\[Errno -?\d+\] ([^\]\)']+)", text)
    return (match.group(1).replace("_", " ") if match else text).strip().rstrip(".").lower()


def _origin(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode()}"


def _transport_error(exc: httpx.TransportError, url: httpx.URL, service: str) -> CliError:
    """What a failed exchange means for the operator, by what failed."""
    origin, reason = _origin(url), _reason(exc)
    if "certificate required" in reason or "unknown ca" in reason or "bad certificate" in reason:
        return CliError(f"{origin} refused the TLS client certificate ({reason}): check --cert-file and --key-file "
                        "(a certificate the service's client CA signed)")
    if "certificate verify failed" in reason or "wrong version number" in reason or "ssl" in reason:
        return CliError(f"TLS with {origin} failed ({reason}): check --ca-file (the CA that signed the "
                        "service's certificate) and the URL's scheme (http/https)")
    if isinstance(exc, httpx.TimeoutException):
        return CliError(f"no answer from {origin} in time ({type(exc).__name__}): is the {service} overloaded "
                        "or behind a firewall? check --url")
    if url.scheme == "https" and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        # A service requiring client certificates may drop a connection without one, with no TLS alert.
        return CliError(f"{origin} closed the connection ({reason}): if the {service} requires mutual TLS, check "
                        "--cert-file and --key-file; else check --url")
    return CliError(f"cannot reach {origin} ({reason}): is the {service} running? check --url")


class _Transport(httpx.HTTPTransport):
    """httpx's transport, with failures turned into CliErrors that name the URL and what to check."""

    def __init__(self, *, service: str, credential: str, verify: ssl.SSLContext | bool) -> None:
        super().__init__(verify=verify)
        self.service, self.credential = service, credential

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            raise _transport_error(exc, request.url, self.service) from None
        if response.status_code in (401, 403):
            response.read()
            detail = _detail(response)
            raise CliError(f"{_origin(request.url)} refused the credential (HTTP {response.status_code}: {detail}): "
                           f"check {self.credential}")
        return response


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", ""))[:200]
    except ValueError:
        return response.text[:200]


def service_client(url: str, *, tls: Tls, service: str, token: str | None, credential: str,
                   header: str = "Authorization", timeout: float = 60.0) -> httpx.Client:
    """A client for one service; `credential` names where the token comes from (e.g. '--token or COORD_ADMIN_TOKEN')."""
    if not token:
        raise CliError(f"no credential for the {service} at {url}: pass {credential}")
    value = f"Bearer {token}" if header == "Authorization" else token
    transport = _Transport(service=service, credential=credential, verify=tls.verify())
    return httpx.Client(base_url=url.rstrip("/"), headers={header: value}, timeout=timeout, transport=transport)


def checked(resp: httpx.Response) -> Any:
    """The JSON body of a successful answer ({} when empty); an error answer is raised via raise_for."""
    raise_for(resp.status_code, resp.content,
              source=f"HTTP {resp.status_code} from {resp.request.method} {resp.request.url.path}")
    return resp.json() if resp.content else {}


def settings_error(exc: pydantic.ValidationError) -> str:
    """A settings error as one line: the variables and the rules, never the values."""
    prefix = str(getattr(exc, "title", ""))
    env = {"PartySettings": "PARTY_", "CoordinatorSettings": "COORD_"}.get(prefix, "")
    return f"invalid settings ({prefix}): {settings_message(exc, env)}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, DomainError):
        return f"{exc.extra.get('code', exc.code)}: {exc.detail}"
    if isinstance(exc, pydantic.ValidationError):
        return settings_error(exc)
    return str(exc)


def reported(command: F) -> F:
    """Give a command --ca-file/--cert-file/--key-file (passed to it as `tls`) and one-line errors (exit 1)."""
    signature = inspect.signature(command, eval_str=True)
    takes_tls = "tls" in signature.parameters
    params = [p for name, p in signature.parameters.items() if name != "tls"]
    if takes_tls:
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
                   for name, annotation in TLS_OPTIONS.items()]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if takes_tls:
                kwargs["tls"] = Tls(**{name: kwargs.pop(name, None) for name in TLS_OPTIONS})
            return command(*args, **kwargs)
        except (CliError, DomainError, pydantic.ValidationError) as exc:
            err.print(f"[red]error[/red] {escape(_one_line(exc))}", soft_wrap=True)
            raise typer.Exit(1) from None

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]
