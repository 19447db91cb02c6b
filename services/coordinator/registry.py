"""Party registry use cases: register, update, remove, list (changes take effect without a restart)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.coordinator.sealing import Sealer
from services.db.coordinator_tables import PartyRow
from services.errors import Conflict, NotFound, ValidationFailed


@dataclass(frozen=True)
class PartyEndpoint:
    """What the runner needs to reach a party (a snapshot, detached from the session)."""

    party_id: str
    url: str
    token: str
    role: str
    enabled: bool
    tls_name: str | None = None  # the SAN the party's certificate must carry (None: the URL's host)


class _Plain:
    """No sealer configured on the session (tests of the registry alone): values are kept as given."""

    @staticmethod
    def seal(token: str) -> str:
        return token

    @staticmethod
    def open(stored: str) -> str:
        return stored


def _sealer(session: Session) -> Sealer | _Plain:
    """The app's sealer travels in the session factory's info (services.coordinator.sealing)."""
    sealer: Sealer | None = session.info.get("sealer")
    return sealer if sealer is not None else _Plain()


def _snapshot(row: PartyRow, session: Session) -> PartyEndpoint:
    return PartyEndpoint(row.party_id, row.url.rstrip("/"), _sealer(session).open(row.token), row.role, row.enabled,
                         row.tls_name)


def seal_stored(*, session: Session) -> int:
    """Seal credentials stored in clear by an older coordinator; returns how many were sealed."""
    sealer = _sealer(session)
    if not isinstance(sealer, Sealer):
        return 0
    rows = [r for r in session.scalars(select(PartyRow)) if not Sealer.is_sealed(r.token)]
    for row in rows:
        row.token = sealer.seal(row.token)
    session.commit()
    return len(rows)


def _check_url(url: str, *, https_only: bool = False, allowed_hosts: frozenset[str] = frozenset()) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValidationFailed("url must start with http:// or https://", extra={"field": "url"})
    if https_only and not url.startswith("https://"):  # the credential would cross the network in clear
        raise ValidationFailed("url must be https:// (this coordinator is configured for TLS; http:// party URLs "
                               "are accepted in dev mode only)", extra={"field": "url"})
    try:  # found by make fuzz: "http://[" was stored, and every later call to that party failed
        parts = urlsplit(url)
        valid = bool(parts.hostname) and not parts.query and not parts.fragment and parts.port != 0
    except ValueError:  # a malformed host or port
        valid = False
    if not valid:
        raise ValidationFailed("url must be an absolute http(s) URL with a host, without query or fragment",
                               extra={"field": "url"})
    if "@" in parts.netloc:  # user:password@host would be stored and listed back in clear
        raise ValidationFailed("url must not carry userinfo (user:password@): the party's credential is the "
                               "token field, sealed at rest", extra={"field": "url"})
    host = (parts.hostname or "").lower().rstrip(".")
    if allowed_hosts and host not in allowed_hosts:
        raise ValidationFailed(f"url host {host[:64]!r} is not in the coordinator's allowed party hosts "
                               "(COORD_PARTY_HOSTS)", extra={"field": "url"})


def without_userinfo(url: str) -> str:
    """A URL as it may be listed: a `user:password@` stored before URLs with userinfo were refused is dropped."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _check_pin(tls_name: str | None, *, https_only: bool) -> None:
    # Under TLS outside dev mode every fedrec-issued server certificate names 127.0.0.1 and localhost:
    # checked against the URL's host alone, any of them would pass for the party and receive its token.
    if https_only and tls_name is None:
        raise ValidationFailed("tls_name is required: this coordinator is configured for TLS outside dev mode, "
                               "so each party is pinned to the name its certificate must carry",
                               extra={"field": "tls_name"})


def _check_tls_name(url: str, tls_name: str | None) -> None:
    if tls_name is not None and not url.startswith("https://"):
        raise ValidationFailed("tls_name pins the party's TLS certificate: it needs an https:// url",
                               extra={"field": "tls_name"})


def register(*, session: Session, party_id: str, url: str, token: str, role: str = "ratings",
             tls_name: str | None = None, https_only: bool = False,
             allowed_hosts: frozenset[str] = frozenset()) -> PartyEndpoint:
    """Add a party; 409 if the id is taken. `tls_name`: the SAN its certificate must carry (its pinned identity);
    required when `https_only`. `allowed_hosts`: when not empty, the only hosts a party URL may name."""
    _check_url(url, https_only=https_only, allowed_hosts=allowed_hosts)
    _check_tls_name(url, tls_name)
    _check_pin(tls_name, https_only=https_only)
    if session.get(PartyRow, party_id) is not None:
        raise Conflict(f"party {party_id!r} is already registered", extra={"field": "party_id"})
    row = PartyRow(party_id=party_id, url=url, token=_sealer(session).seal(token), role=role, enabled=True,
                   tls_name=tls_name)
    session.add(row)
    session.commit()
    return _snapshot(row, session)


def update(
    *, session: Session, party_id: str, url: str | None = None, token: str | None = None,
    role: str | None = None, enabled: bool | None = None, tls_name: str | None = None, https_only: bool = False,
    allowed_hosts: frozenset[str] = frozenset(),
) -> PartyEndpoint:
    """Change a party's URL, credential, role, enabled flag or TLS name; running runs see it on their next call."""
    row = session.get(PartyRow, party_id)
    if row is None:
        raise NotFound(f"party {party_id!r} is not registered", extra={"field": "party_id"})
    if url is not None:
        _check_url(url, https_only=https_only, allowed_hosts=allowed_hosts)
        row.url = url
    if tls_name is not None:
        row.tls_name = tls_name
    _check_tls_name(row.url, row.tls_name)
    _check_pin(row.tls_name, https_only=https_only)
    if token is not None:
        row.token = _sealer(session).seal(token)
    if role is not None:
        row.role = role
    if enabled is not None:
        row.enabled = enabled
    session.commit()
    return _snapshot(row, session)


def remove(*, session: Session, party_id: str) -> None:
    """Delete a party from the registry."""
    row = session.get(PartyRow, party_id)
    if row is None:
        raise NotFound(f"party {party_id!r} is not registered", extra={"field": "party_id"})
    session.delete(row)
    session.commit()


def get(*, session: Session, party_id: str) -> PartyEndpoint:
    """One party."""
    row = session.get(PartyRow, party_id)
    if row is None:
        raise NotFound(f"party {party_id!r} is not registered", extra={"field": "party_id"})
    return _snapshot(row, session)


def list_parties(*, session: Session) -> list[PartyEndpoint]:
    """All parties, ordered by id."""
    return [_snapshot(r, session) for r in session.scalars(select(PartyRow).order_by(PartyRow.party_id))]


def endpoints(*, session: Session, party_ids: list[str]) -> dict[str, PartyEndpoint]:
    """Current endpoints of the given parties that are still registered (read fresh each round)."""
    rows = session.scalars(select(PartyRow).where(PartyRow.party_id.in_(party_ids)))
    return {r.party_id: _snapshot(r, session) for r in rows}
