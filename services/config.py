"""Settings for the party and coordinator services (read from the environment only in __main__/CLI)."""

from __future__ import annotations

import base64
import hashlib
import math
from collections import Counter
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_ADMIN_TOKEN = "dev-admin-token"
DEV_COORDINATOR_TOKEN = "dev-coordinator-token"
DEV_API_KEY = "dev-api-key"
MIN_SECRET_CHARS = 32
MIN_SECRET_BITS = 80  # estimated, see _estimated_bits
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# Public values no deployment may run with: the dev tokens and the placeholders of .env.example.
KNOWN_PLACEHOLDERS = frozenset({DEV_ADMIN_TOKEN, DEV_COORDINATOR_TOKEN, DEV_API_KEY, "change-me", "changeme"})
PLACEHOLDER_PREFIX = "change-me"


def _unsafe_secret(value: str) -> str | None:
    """Why a secret must not be used outside dev mode, or None."""
    if value in KNOWN_PLACEHOLDERS or value.lower().startswith(PLACEHOLDER_PREFIX):
        return "is a public placeholder or dev token"
    if len(value) < MIN_SECRET_CHARS:
        return f"is shorter than {MIN_SECRET_CHARS} characters"
    if any(c.isspace() or not c.isprintable() for c in value):
        return "contains whitespace or control characters"
    if _estimated_bits(value) < MIN_SECRET_BITS:
        return (f"has too little entropy (about {_estimated_bits(value):.0f} bits; a random secret of "
                f"{MIN_SECRET_CHARS} characters has more than {MIN_SECRET_BITS})")
    return None


def _estimated_bits(value: str) -> float:
    """min(length × the characters' empirical entropy, length × the empirical entropy of the steps between them).

    The steps catch sequences with many distinct characters in an order anyone can guess ('abcd…'): a
    counting run has one step. Random hex of 32 characters scores about 100 bits, `token_urlsafe(32)`
    about 200; 32×'a' and 'abc…z' score (almost) 0.
    """
    def entropy(symbols: list[int] | str) -> float:
        counts, n = Counter(symbols), len(symbols)
        return n * -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0

    return min(entropy(value), entropy([ord(b) - ord(a) for a, b in zip(value, value[1:])]))


def check_secrets(prefix: str, secrets: dict[str, list[str]]) -> None:
    """Refuse known placeholders and short secrets outside dev mode, naming the setting."""
    for name, values in secrets.items():
        for value in values:
            reason = _unsafe_secret(value)
            if reason:
                raise ValueError(f"{prefix}{name.upper()} {reason}; generate one with "
                                 "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")


# The demo's party secrets (services.verfedgnn.secure.dev_party_secret, what cli.localfed gives its
# parties) are derived from the party id by a public formula: anyone can compute them.
DEV_PARTY_SECRET_LABEL = b"fedrec-dev-party-secret|"
DEMO_PARTY_IDS = ("party", "p1", "p2", "p3", *(f"party{k}" for k in range(16)))


def _public_party_secret(secret: bytes, party_id: str) -> bool:
    ids = {party_id, *DEMO_PARTY_IDS}
    return any(secret == hashlib.sha256(DEV_PARTY_SECRET_LABEL + p.encode()).digest() for p in ids)


def party_secret_problem(secret_hex: str, party_id: str) -> str | None:
    """Why a PARTY_SECRET must not be used outside dev mode (a public or low-entropy value), or None.

    A random secret of n bytes has almost surely more than min(n, 32) / 2 distinct byte values and
    no constant step between its bytes; all-zero, repeated and counting secrets fail one of both.
    """
    secret = bytes.fromhex(secret_hex)
    if _public_party_secret(secret, party_id):
        return "is the demo's public secret (derived from a party id)"
    steps = {(b - a) % 256 for a, b in zip(secret, secret[1:])}
    if len(set(secret)) < min(len(secret), 32) // 2 or len(steps) == 1:
        return "has too little entropy (repeated bytes or a counting pattern)"
    return None


def _b64(value: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(value)
    except ValueError:
        return b""


def check_dev_host(prefix: str, dev_mode: bool, host: str) -> None:
    """Dev mode runs with public tokens, so it may only listen on loopback."""
    if dev_mode and host not in LOOPBACK_HOSTS:
        raise ValueError(f"{prefix}DEV_MODE=1 with {prefix}HOST={host!r}: dev mode listens on loopback only")


class GuardSettings(BaseSettings):
    """Limits of the request guard (api_common.guard), shared by both services; 413 past a body limit."""

    # Bodies of routes without one (GET, DELETE, step calls) and of routes with small JSON bodies.
    none_max_body_bytes: int = Field(64 << 10, ge=0)
    small_max_body_bytes: int = Field(64 << 10, ge=1)
    # JSON batches (interactions, items, social links: 50,000 rows of ids up to 255 characters; evaluation split).
    json_max_body_bytes: int = Field(32 << 20, ge=1)
    # POST /v1/predictions: 10,000 pairs of ids of ~30 characters. An API key (a client app's credential)
    # opens this route, and JSON is parsed on the event loop holding the GIL, so the bound is tight.
    predictions_max_body_bytes: int = Field(1 << 20, ge=1)
    # Streamed CSV/NDJSON uploads (never held in memory, so the limit is about disk and time).
    bulk_max_body_bytes: int = Field(8 << 30, ge=1)
    # Binary federation bodies (PSI points, public parameters, projection sums).
    federation_max_body_bytes: int = Field(256 << 20, ge=1)
    # Failed authentications per client address within the window before answers turn 429.
    auth_failure_limit: int = Field(100, ge=1)
    auth_failure_window_s: float = Field(60.0, gt=0)
    # Addresses (or CIDR ranges) of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed;
    # none by default, so a client cannot pick the address the throttle counts it under.
    trusted_proxies: list[str] = Field(default_factory=list)
    # Slow clients (api_common.http_protocol, api_common.guard): a request's headers must arrive within
    # header_timeout_s of its first byte and fit max_header_bytes (408 / 431, connection closed); a body
    # that stops arriving for body_timeout_s while the service waits for it is answered 408.
    header_timeout_s: float = Field(10.0, gt=0, le=3600)
    max_header_bytes: int = Field(64 << 10, ge=1024)
    body_timeout_s: float = Field(30.0, gt=0, le=3600)
    # Connections plus requests in progress per process; past it new requests are answered 503.
    max_connections: int = Field(2048, ge=1)
    # Open connections one client address may hold per process (trusted proxies exempt); past it a new
    # connection is answered 503 and closed at once, so one caller cannot take every slot.
    max_connections_per_address: int = Field(256, ge=1)
    # Of max_connections, this many are kept for callers whose first request carries the admin token (at a
    # party, also the coordinator credential): many addresses together cannot lock the federation out. A
    # connection past the open share must send such headers within reserved_header_timeout_s or is answered
    # 503 (api_common.http_protocol.AddressSlots); at most half of max_connections is reserved.
    reserved_connections: int = Field(64, ge=0)
    reserved_header_timeout_s: float = Field(2.0, gt=0, le=3600)
    # A request body must average at least this many bytes per second of the service's waiting, after a
    # grace of body_timeout_s; a slower one is answered 408 (a byte every 29 s no longer holds a slot).
    min_body_rate_bytes_s: int = Field(1024, ge=0)

    def reserved_credentials(self) -> list[str]:
        """Bearer tokens whose holders may take the reserved connection slots (each service names its own)."""
        return []


def check_pair(prefix: str, cert: Path | None, key: Path | None, what: str) -> None:
    """A certificate needs its key and the other way round."""
    if (cert is None) != (key is None):
        raise ValueError(f"{prefix}{what}_CERT_FILE and {prefix}{what}_KEY_FILE go together: set both or neither")


class PartySettings(GuardSettings):
    """Configuration of one party service."""

    # Errors name the variable and the rule, never its value (pydantic would echo part of the input).
    model_config = SettingsConfigDict(env_prefix="PARTY_", extra="forbid", hide_input_in_errors=True)

    party_id: str = "party"
    role: Literal["ratings", "social"] = "ratings"
    database_url: str = "sqlite:///./var/party.db"
    data_dir: Path = Path("./var/party")
    rating_min: float = 1.0
    rating_max: float = 5.0
    # explicit: rows are ratings on [rating_min, rating_max]; implicit: rows are interactions with an
    # optional positive weight (default 1), trained with the ranking objective only (docs/data.md).
    feedback: Literal["explicit", "implicit"] = "explicit"
    # Secrets: no working default outside dev mode (validated below).
    dev_mode: bool = False
    admin_token: str | None = None
    coordinator_token: str | None = None
    api_keys: list[str] = Field(default_factory=list)
    ingest_batch_rows: int = 50_000
    # Side information (docs/features.md): a run uses the party's user and item attributes, as private
    # attribute nodes, unless this is off; an upload is refused when a categorical column would exceed the cap.
    use_features: bool = True
    feature_max_categories: int = Field(1000, ge=1, le=100_000)
    host: str = "127.0.0.1"
    port: int = 8001
    # uvicorn worker processes of `fedrec party serve` (each holds its own serving snapshot).
    workers: int = Field(1, ge=1, le=64)
    # Process roles (docs/architecture.md, "Party process roles"): `all` serves every route; `api` serves
    # ingest, serving, users and summaries and forwards the coordinator's stateful routes (/v1/federation,
    # /v1/social, user erasure) to federation_url; `federation` serves those and holds the run state.
    # `all` with workers > 1 starts one federation process on 127.0.0.1:federation_port and api workers.
    process_role: Literal["all", "api", "federation"] = "all"
    federation_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+/?$")
    federation_port: int = Field(0, ge=0, le=65535)  # 0: a free loopback port, chosen at start
    # Deadline of one forwarded call (connect 5 s; then this long without a byte): at least the
    # coordinator's COORD_REQUEST_TIMEOUT_S, or a long step would be cut at the API process first.
    federation_timeout_s: float = Field(600.0, gt=0.0, le=3600.0)
    # How often each process checks whether serving must rebuild its snapshot (another process
    # published, ingested or erased); the process that made the change sees it at once.
    serving_refresh_s: float = Field(1.0, gt=0.0, le=3600.0)
    # /metrics answers with this bearer token only (unset: /metrics is off); never an API credential.
    metrics_token: str | None = None
    log_format: Literal["json", "text"] = "json"
    # HTTPS: this party's certificate and key; with tls_client_ca_file, callers must present a client
    # certificate signed by that CA (mutual TLS) in addition to their token.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    # Social role: lifetime (epsilon, delta) of the social graph over all sessions (basic composition).
    social_epsilon_total: float = Field(30.0, gt=0.0)
    social_delta_total: float = Field(1e-3, gt=0.0, lt=1.0)
    social_allow_no_dp: bool = False  # a peer may open noise-free sessions only if the owner allows it
    # One X chunk of 256 rows x 64 cols at 3072 bits is ~12.6 MB; bigger social bodies are refused (413).
    social_max_body_bytes: int = Field(64 << 20, ge=1)
    # Shortest Paillier modulus a peer's key may have; dev mode defaults to 512 (small keys only in tests).
    paillier_min_key_bits: int = Field(2048, ge=256)
    # This party's long-lived secret (hex, >= 16 bytes): its X25519/Ed25519 keys, its share of the agreed
    # projection seed and its private initialisation derive from it. Unset: drawn once and kept in the DB.
    secret: str | None = Field(default=None, repr=False, pattern=r"^([0-9a-fA-F]{2}){16,}$")
    # Whole-run DP (randomized response on this party's training matrix): configure refuses a run whose
    # dp_epsilon is below this floor, or whose expected released ratings (true ones kept plus noise
    # cells) exceed this cap; small ε makes a sparse matrix dense (services.party.dp_policy).
    dp_min_epsilon: float = Field(1.0, gt=0.0)
    dp_max_released: int = Field(50_000_000, ge=1)
    # Pinned Ed25519 identity keys of the peers ({party_id: hex}); with pins set no other peer id is accepted.
    # Outside dev mode every peer must be pinned; trust on first use of unpinned peers is dev mode only.
    peer_identities: dict[str, str] = Field(default_factory=dict)
    # Distributed training (docs/distributed.md): the federation process trains each VerFedGNN run with this many
    # torch.distributed ranks (itself rank 0), the run's users split among them; workers beyond
    # train_local_workers join from other machines at train_master_addr:train_master_port.
    train_workers: int = Field(1, ge=1, le=256)
    train_local_workers: int | None = Field(None, ge=0, le=255)
    train_master_addr: str = "127.0.0.1"
    train_master_port: int = Field(0, ge=0, le=65535)  # 0: a free port (only when every rank is local)
    train_timeout_s: float = Field(600.0, gt=0.0, le=86400.0)
    train_idle_s: float = Field(900.0, gt=0.0, le=86400.0)

    def reserved_credentials(self) -> list[str]:
        """The admin token and the coordinator credential: the operator and the federation keep their slots.

        Not the API keys: apps are many callers (P4: one key held 2,047 slots with slow bodies)."""
        return [t for t in (self.admin_token, self.coordinator_token) if t]

    @model_validator(mode="after")
    def _secrets(self) -> PartySettings:
        """Fill dev secrets (and the dev key-size floor) in dev mode; refuse to start without secrets otherwise."""
        if self.dev_mode:
            self.admin_token = self.admin_token or DEV_ADMIN_TOKEN
            self.coordinator_token = self.coordinator_token or DEV_COORDINATOR_TOKEN
            self.api_keys = self.api_keys or [DEV_API_KEY]
            if "paillier_min_key_bits" not in self.model_fields_set:
                self.paillier_min_key_bits = 512
        if (self.train_workers > 1 and self.train_master_port == 0 and self.train_local_workers is not None
                and self.train_local_workers < self.train_workers - 1):
            raise ValueError("PARTY_TRAIN_MASTER_PORT must be set when workers join from other machines "
                             "(PARTY_TRAIN_LOCAL_WORKERS < PARTY_TRAIN_WORKERS - 1)")
        missing = [n for n in ("admin_token", "coordinator_token") if not getattr(self, n)]
        if missing:
            raise ValueError(f"missing secrets {missing}: set PARTY_ADMIN_TOKEN etc. or PARTY_DEV_MODE=1")
        # Each credential must open only its own routes, so no two may be equal.
        secrets = [self.admin_token, self.coordinator_token, *self.api_keys,
                   *([self.metrics_token] if self.metrics_token else [])]
        if len(set(secrets)) != len(secrets):
            raise ValueError("admin token, coordinator token, API keys and metrics token must all differ")
        if not self.dev_mode:
            check_secrets("PARTY_", {"admin_token": [self.admin_token or ""],
                                     "coordinator_token": [self.coordinator_token or ""],
                                     "api_keys": self.api_keys,
                                     "metrics_token": [self.metrics_token] if self.metrics_token else []})
            reason = party_secret_problem(self.secret, self.party_id) if self.secret else None
            if reason:  # the message names the variable, never any part of the value
                raise ValueError(f"PARTY_SECRET {reason}; generate one with "
                                 "`python -c 'import secrets; print(secrets.token_hex(32))'`")
        check_pair("PARTY_", self.tls_cert_file, self.tls_key_file, "TLS")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("PARTY_TLS_CLIENT_CA_FILE needs PARTY_TLS_CERT_FILE: client certificates need HTTPS")
        check_dev_host("PARTY_", self.dev_mode, self.host)
        if self.federation_url is not None and self.process_role != "api":
            raise ValueError("PARTY_FEDERATION_URL is for PARTY_PROCESS_ROLE=api (processes that forward federation "
                             "routes); role all starts its own federation process, role federation is one")
        if self.process_role == "federation" and self.workers > 1:
            raise ValueError("PARTY_PROCESS_ROLE=federation holds run state in memory: it runs as one process "
                             "(PARTY_WORKERS=1); scale the API processes instead")
        if self.rating_min >= self.rating_max:
            raise ValueError("rating_min must be below rating_max")
        return self


class CoordinatorSettings(GuardSettings):
    """Configuration of the coordinator service."""

    model_config = SettingsConfigDict(env_prefix="COORD_", extra="forbid", hide_input_in_errors=True)

    database_url: str = "sqlite:///./var/coordinator.db"
    data_dir: Path = Path("./var/coordinator")
    dev_mode: bool = False
    admin_token: str | None = None
    api_keys: list[str] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8000
    # Key sealing party credentials in the database (urlsafe base64 of 32 bytes); unset: a key file is
    # created owner-only beside the SQLite database (or in data_dir). See services.coordinator.sealing.
    credential_key: str | None = None
    request_timeout_s: float = 120.0
    max_retries: int = 3
    retry_backoff_s: float = 0.2
    # How often a paused run (below min_parties) probes its parties again.
    pause_poll_s: float = 2.0
    # How long a run may wait for its parties (paused, no round completing) before it ends failed.
    wait_deadline_s: float = Field(600.0, gt=0.0)
    # Pre-flight (before PSI, and `fedrec coordinator check`): each party's deadline to answer.
    preflight_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    # A run whose parties have fewer users in common than this ends failed right after PSI.
    min_common_users: int = Field(10, ge=1)
    # Serving fan-out (GET /v1/users/{id}/recommendations): each party's deadline. The parties are asked
    # at once; a party that has not answered by then is listed in "unavailable" and the merge of the
    # others comes back with "partial": true (an app waiting on top-K cannot wait a training timeout).
    fanout_timeout_s: float = Field(2.0, gt=0.0, le=120.0)
    # Party URL policy: no userinfo ever; when this list is not empty, a registered party URL must name
    # one of these hosts (names or addresses, compared lower-case), so a stolen admin token cannot point
    # a party's credential at a host of its choosing.
    party_hosts: list[str] = Field(default_factory=list, max_length=1000)
    # Schedules: how many may exist, and the shortest interval one may fire at (a cron fires at most
    # once a minute anyway); each firing may start a run, so both bound the runs schedules can start.
    max_schedules: int = Field(50, ge=1, le=10_000)
    schedule_min_interval_s: int = Field(60, ge=1, le=366 * 24 * 3600)
    # /metrics answers with this bearer token only (unset: /metrics is off); never an API credential.
    metrics_token: str | None = None
    log_format: Literal["json", "text"] = "json"
    # HTTPS for the coordinator's own API; with tls_client_ca_file, its callers must present a client
    # certificate signed by that CA (mutual TLS) in addition to their token.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    # Calls to parties: verify their certificates against this CA bundle (default: the system's), and
    # present this client certificate to parties that require one (mutual TLS).
    party_ca_file: Path | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    # Promotion gate: a run's release becomes active only if its pooled validation RMSE is at most the
    # active release's plus release_tolerance and its pooled validation NDCG@10 at least the active
    # release's minus release_ndcg_tolerance (else it stays staged with both figures; an admin may force it).
    # Two settings: the figures have different units (rating points; a share in [0, 1]).
    release_tolerance: float = Field(0.005, ge=0.0)
    release_ndcg_tolerance: float = Field(0.01, ge=0.0, le=1.0)
    # Retention: the newest this many releases (and always the active one) keep their models at the parties.
    releases_keep: int = Field(5, ge=1, le=1000)

    @model_validator(mode="after")
    def _secrets(self) -> CoordinatorSettings:
        """Fill dev secrets in dev mode; refuse to start without secrets otherwise."""
        if self.dev_mode:
            self.admin_token = self.admin_token or DEV_ADMIN_TOKEN
            self.api_keys = self.api_keys or [DEV_API_KEY]
        if not self.admin_token:
            raise ValueError("missing secret admin_token: set COORD_ADMIN_TOKEN or COORD_DEV_MODE=1")
        if self.credential_key is not None and len(_b64(self.credential_key)) != 32:
            raise ValueError("COORD_CREDENTIAL_KEY must be urlsafe base64 of 32 bytes")
        if self.admin_token in self.api_keys:
            raise ValueError("COORD_API_KEYS holds COORD_ADMIN_TOKEN: a client key must not open admin routes")
        if self.metrics_token and self.metrics_token in (self.admin_token, *self.api_keys):
            raise ValueError("COORD_METRICS_TOKEN must differ from the admin token and the API keys")
        if not self.dev_mode:
            check_secrets("COORD_", {"admin_token": [self.admin_token], "api_keys": self.api_keys,
                                     "metrics_token": [self.metrics_token] if self.metrics_token else []})
        check_pair("COORD_", self.tls_cert_file, self.tls_key_file, "TLS")
        check_pair("COORD_", self.client_cert_file, self.client_key_file, "CLIENT")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("COORD_TLS_CLIENT_CA_FILE needs COORD_TLS_CERT_FILE: client certificates need HTTPS")
        check_dev_host("COORD_", self.dev_mode, self.host)
        return self

    def reserved_credentials(self) -> list[str]:
        """The admin token (the operator's runs and registry); not the apps' API keys."""
        return [self.admin_token] if self.admin_token else []

    @property
    def https_parties_only(self) -> bool:
        """A coordinator configured for TLS (outside dev mode) registers parties at https:// URLs only."""
        tls = (self.tls_cert_file, self.party_ca_file, self.client_cert_file)
        return not self.dev_mode and any(f is not None for f in tls)


S = TypeVar("S", PartySettings, CoordinatorSettings)


def settings_message(exc: ValidationError, prefix: str) -> str:
    """A settings error as one line naming the variables and the rules, never any value."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        reason = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{prefix}{where.upper()}: {reason}" if where else reason)
    return "; ".join(parts)


def settings_or_exit(cls: type[S], **overrides: Any) -> S:
    """Read settings from the environment; on an error exit with one line (no traceback, no values)."""
    try:
        return cls(**overrides)
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        raise SystemExit(f"invalid settings ({cls.__name__}): {settings_message(exc, prefix)}") from None
