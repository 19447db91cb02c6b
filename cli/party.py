"""`fedrec party` sub-commands: serve, migrate, ingest a file into a running party, register users, label its
evaluation split, vacuum (PostgreSQL), print its identity key."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from enum import Enum
from itertools import islice
from pathlib import Path
from typing import Annotated, Any, TextIO

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from cli.http import CliError, Tls, checked, reported, service_client
from services.data.features import read_features
from services.data.parsing import DataFormatError
from services.errors import DomainError, raise_for
from services.protocol.ids import id_problem

err = Console(stderr=True)


class FileFormat(str, Enum):
    """Input formats `fedrec party ingest` understands."""

    csv = "csv"
    ndjson = "ndjson"
    ml100k = "ml100k"  # u.data: user \t item \t rating \t timestamp
    filmtrust = "filmtrust"  # ratings.txt / trust.txt: whitespace-separated, no header


class ProcessRole(str, Enum):
    """Which routes a party process serves (docs/architecture.md, "Party process roles")."""

    all = "all"
    api = "api"
    federation = "federation"


class Kind(str, Enum):
    """What the file holds."""

    interactions = "interactions"
    social_links = "social-links"
    user_features = "user-features"  # side information: an id column plus categorical and numeric columns
    item_features = "item-features"


SPLITS = ("train", "valid", "test")
HEADERS = {
    (FileFormat.ml100k, Kind.interactions): ["user_id", "item_id", "rating", "timestamp"],
    (FileFormat.filmtrust, Kind.interactions): ["user_id", "item_id", "rating"],
    (FileFormat.filmtrust, Kind.social_links): ["src_user_id", "dst_user_id", "weight"],
}


UrlOpt = Annotated[str, typer.Option(envvar="FEDREC_PARTY_URL", help="party base URL")]
TokenOpt = Annotated[str, typer.Option(envvar="PARTY_ADMIN_TOKEN", help="admin token (default PARTY_ADMIN_TOKEN)")]


def _client(url: str, token: str, tls: Tls, *, timeout: float = 60.0) -> httpx.Client:
    return service_client(url, tls=tls, service="party", token=token, timeout=timeout,
                          credential="--token (or PARTY_ADMIN_TOKEN), the party's admin token")


@reported
def serve(
    host: Annotated[str | None, typer.Option(help="bind address (default PARTY_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default PARTY_PORT)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="worker processes (default PARTY_WORKERS)")] = None,
    role: Annotated[ProcessRole | None, typer.Option(
        help="all: every route (with --workers > 1, one federation process on loopback beside API workers); "
             "api: ingest, serving, users, summaries, federation routes forwarded to PARTY_FEDERATION_URL; "
             "federation: the federation routes and the run state (default PARTY_PROCESS_ROLE or all)")] = None,
) -> None:
    """Run the party's migrations, then serve its API (settings from PARTY_* variables)."""
    from party_api.__main__ import main

    args = [*(["--host", host] if host else []), *(["--port", str(port)] if port else []),
            *(["--workers", str(workers)] if workers else []), *(["--role", role.value] if role else [])]
    main(args)


@reported
def migrate(
    database_url: Annotated[str | None, typer.Option(help="default: PARTY_DATABASE_URL")] = None,
) -> None:
    """Bring the party database to the current schema."""
    from services.config import PartySettings
    from services.db.session import migrate as run

    url = database_url or PartySettings().database_url
    run(url)
    err.print(f"party database at head: {url}")


@reported
def vacuum(
    database_url: Annotated[str | None, typer.Option(help="default: PARTY_DATABASE_URL")] = None,
) -> None:
    """PostgreSQL: rewrite the party's tables and indexes (VACUUM FULL) so erased users leave no residue."""
    from services.config import PartySettings
    from services.db.maintenance import SQLITE_NOTE, is_postgres, vacuum_party

    url = database_url or PartySettings().database_url
    if not is_postgres(url):
        err.print(f"[red]{SQLITE_NOTE}")
        raise typer.Exit(1)
    report = vacuum_party(database_url=url)
    err.print(f"rewrote {len(report.tables)} tables: {', '.join(report.tables)}")
    if not report.checkpoint:
        err.print("CHECKPOINT not permitted for this role: WAL segments holding erased rows are recycled "
                  "after the server's next checkpoints")
    typer.echo(json.dumps({"tables": report.tables, "checkpoint": report.checkpoint}))


def _rows(text: TextIO, fmt: FileFormat, kind: Kind) -> tuple[list[str] | None, Iterator[Any]]:
    """Header (None for NDJSON) and an iterator over the file's records."""
    if fmt is FileFormat.ndjson:
        return None, (line for line in text if line.strip())
    if fmt is FileFormat.csv:
        reader = csv.reader(text)
        return next(reader, []), reader
    if (fmt, kind) not in HEADERS:
        raise typer.BadParameter(f"format {fmt.value} holds no {kind.value}")
    sep = "\t" if fmt is FileFormat.ml100k else None
    return HEADERS[(fmt, kind)], (line.split(sep) for line in text if line.strip())


def _chunk_body(header: list[str] | None, records: list[Any]) -> bytes:
    """One request body: CSV with the header, or NDJSON lines as they were."""
    if header is None:
        return "".join(r if r.endswith("\n") else r + "\n" for r in records).encode()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(records)
    return out.getvalue().encode()


def _explain(status: int, error: DomainError, offset: int) -> str:
    """A refused chunk's errors with row numbers counted from the start of the file."""
    lines = [f"HTTP {status} {error.extra.get('code', error.code)}: {error.detail}"]
    for e in error.extra.get("errors") or []:
        row = e.get("row")
        where = "header" if row == 0 else f"data row {offset + row}" if row else "body"
        lines.append(f"  {where}: {e.get('field') or ''} {e.get('reason')}")
    return "\n".join(lines)


@reported
def ingest(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="file to upload")],
    url: UrlOpt = "http://127.0.0.1:8001",
    token: TokenOpt = "",
    fmt: Annotated[FileFormat, typer.Option("--format", help="input format")] = FileFormat.csv,
    kind: Annotated[Kind, typer.Option(help="what the file holds")] = Kind.interactions,
    chunk_rows: Annotated[
        int, typer.Option(min=1, help="rows per request (each atomic)")
    ] = 100_000,
    id_column: Annotated[str | None, typer.Option(help=(
        "features: the CSV's id column (default user_id / item_id)"))] = None,
    categorical: Annotated[list[str] | None, typer.Option(help=(
        "features: a CSV column to read as text even where its values look numeric (repeatable)"))] = None,
    max_categories: Annotated[int, typer.Option(min=1, help=(
        "features: most distinct values of a categorical column (the party also applies "
        "PARTY_FEATURE_MAX_CATEGORIES)"))] = 1000,
    *, tls: Tls,
) -> None:
    """Stream a file to a running party's bulk endpoint, one atomic request per chunk.

    --kind user-features / item-features: a CSV with an id column plus categorical and numeric columns, or
    ML-100K's u.user / u.item (--format ml100k); checked whole before anything is sent.
    """
    if kind in (Kind.user_features, Kind.item_features):
        _ingest_features(file, url=url, token=token, fmt=fmt, kind=kind, tls=tls, max_categories=max_categories,
                         id_column=id_column or ("user_id" if kind is Kind.user_features else "item_id"),
                         categorical=categorical or [])
        return
    media = "application/x-ndjson" if fmt is FileFormat.ndjson else "text/csv"
    endpoint = f"{url.rstrip('/')}/v1/{kind.value}/bulk"
    headers = {"Content-Type": media}
    stored = 0
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    ]
    with (
        file.open("rb") as raw,
        _client(url, token, tls, timeout=600) as client,
        Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar,
    ):
        task = bar.add_task(f"{file.name} → {endpoint}", total=file.stat().st_size)
        text = io.TextIOWrapper(
            raw, encoding="utf-8-sig", newline="" if fmt is FileFormat.csv else None
        )
        header, records = _rows(text, fmt, kind)
        while chunk := list(islice(records, chunk_rows)):
            response = client.post(endpoint, content=_chunk_body(header, chunk), headers=headers)
            try:
                raise_for(response.status_code, response.content)
            except DomainError as exc:
                bar.stop()
                err.print(
                    f"[red]chunk starting at data row {stored + 1} refused; nothing of it stored"
                )
                err.print(_explain(response.status_code, exc, stored))
                err.print(f"{stored} rows stored before it (earlier chunks committed)")
                raise typer.Exit(1) from exc
            stored += len(chunk)
            bar.update(task, completed=raw.tell())
    typer.echo(json.dumps({"rows": stored, "file": str(file), "endpoint": endpoint}))


def _ingest_features(file: Path, *, url: str, token: str, fmt: FileFormat, kind: Kind, tls: Tls,
                     max_categories: int, id_column: str, categorical: list[str]) -> None:
    """Read and check a whole feature file, then send it in batches of whole users (or items)."""
    if fmt not in (FileFormat.csv, FileFormat.ml100k):
        raise CliError(f"--kind {kind.value} reads --format csv or ml100k, not {fmt.value}")
    try:
        rows = read_features(file, kind=kind.value, fmt=fmt.value,  # type: ignore[arg-type]
                             id_column=id_column, max_categories=max_categories, categorical=categorical)
    except (DataFormatError, UnicodeDecodeError) as exc:
        raise CliError(str(exc.detail if isinstance(exc, DataFormatError) else f"{file}: not UTF-8 text")) from exc
    if not rows:
        raise CliError(f"{file} holds no feature values")
    endpoint = f"/v1/features/{'users' if kind is Kind.user_features else 'items'}"
    batches: list[list[dict[str, Any]]] = [[]]
    by_entity: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        value = {"text": r.text} if r.text is not None else {"number": r.number}
        by_entity.setdefault(r.entity_id, []).append({"id": r.entity_id, "name": r.name, **value})
    for values in by_entity.values():  # an entity's values travel together: a batch replaces them whole
        if len(batches[-1]) + len(values) > FEATURES_PER_REQUEST:
            batches.append([])
        batches[-1].extend(values)
    stored = {"entities": 0, "rows": 0}
    with _client(url, token, tls, timeout=600) as client:
        for batch in batches:
            answer = checked(client.post(endpoint, json={"rows": batch}))
            stored = {k: stored[k] + int(answer[k]) for k in stored}
    typer.echo(json.dumps({**stored, "kind": kind.value, "file": str(file), "endpoint": endpoint}))


def _pairs(path: Path, default_split: str) -> list[dict[str, str]]:
    """Labelled (user, item) pairs of a CSV/TSV/whitespace file; a header names user_id, item_id and maybe split."""
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1) if line.strip()]
    if not lines:
        return []
    first = lines[0][1]
    sep = "\t" if "\t" in first else "," if "," in first else None
    fields = [f.strip().lower() for f in first.split(sep)]
    columns = {"user_id": 0, "item_id": 1}
    if fields[0] in ("user_id", "user"):
        names = [{"user": "user_id", "item": "item_id"}.get(f, f) for f in fields]
        if "item_id" not in names:
            raise CliError(f"{path}:1: a header needs user_id and item_id columns, got {','.join(fields)}")
        columns = {name: names.index(name) for name in ("user_id", "item_id", "split") if name in names}
        lines = lines[1:]
    rows = []
    for n, line in lines:
        values = [v.strip() for v in line.split(sep)]
        if len(values) <= max(columns.values()):
            raise CliError(f"{path}:{n}: expected user and item columns, got {len(values)} field(s)")
        split = values[columns["split"]] if "split" in columns else default_split
        if split not in SPLITS:
            raise CliError(f"{path}:{n}: split must be one of {', '.join(SPLITS)}, got {split[:20]!r}")
        rows.append({"user_id": values[columns["user_id"]], "item_id": values[columns["item_id"]], "split": split})
    return rows


@reported
def evaluation_split(
    test_file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=(
        "test pairs, one user and item per line: CSV or TSV with or without a user_id,item_id[,split] header, or "
        "ML-100K's u1.test (columns after the item are ignored)"))],
    valid: Annotated[Path | None, typer.Option(exists=True, dir_okay=False,
                                               help="validation pairs, same formats")] = None,
    url: UrlOpt = "http://127.0.0.1:8001",
    token: TokenOpt = "",
    held_only: Annotated[bool, typer.Option(help="label only the pairs this party stores and count the others "
                                                 "(a test file of every party's pairs, given to each party of a "
                                                 "vertical split); default: refuse the file if any pair is not "
                                                 "stored here")] = False,
    *, tls: Tls,
) -> None:
    """Label which stored ratings a run scores as test (and validation) instead of training on them."""
    rows = [*(_pairs(valid, "valid") if valid is not None else []), *_pairs(test_file, "test")]
    if not rows:
        raise CliError(f"{test_file} holds no pairs")
    body: dict[str, Any] = {"rows": rows, **({"unheld": "skip"} if held_only else {})}
    with _client(url, token, tls, timeout=600) as client:
        answer = checked(client.put("/v1/evaluation-split", json=body))
    counts = {s: sum(r["split"] == s for r in rows) for s in SPLITS}  # in the file
    typer.echo(json.dumps({"rows": answer["rows"], **counts, "skipped_not_held": answer.get("skipped", 0)}))


USERS_PER_REQUEST = 50_000  # the party's JSON row limit
FEATURES_PER_REQUEST = 50_000


def _user_ids(path: Path) -> list[tuple[int, str]]:
    """(line, id) of a file with one id per line, or a CSV whose header has a user_id column."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        return []
    header = [f.strip().lower() for f in next(csv.reader([numbered[0][1]]))]
    if "user_id" in header:
        column = header.index("user_id")
        rows = []
        for (n, _), fields in zip(numbered[1:], csv.reader(line for _, line in numbered[1:])):
            if len(fields) <= column:
                raise CliError(f"{path}:{n}: no user_id column ({len(fields)} field(s))")
            rows.append((n, fields[column].strip()))
    elif len(header) > 1:
        raise CliError(f"{path}:1: a CSV needs a user_id column in its header, got {','.join(header)[:80]}")
    else:
        rows = [(n, line.strip()) for n, line in numbered]
    for n, user in rows:
        if (reason := id_problem(user)) is not None:
            raise CliError(f"{path}:{n}: {reason}")
    return rows


@reported
def users(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=(
        "customer ids: one per line, or a CSV with a user_id column in its header"))],
    url: UrlOpt = "http://127.0.0.1:8001",
    token: TokenOpt = "",
    *, tls: Tls,
) -> None:
    """Register customer ids at a party, also ones without interactions (they take part in PSI); idempotent."""
    rows = _user_ids(file)
    if not rows:
        raise CliError(f"{file} holds no user ids")
    totals = {"users": 0, "created": 0, "existing": 0}
    with _client(url, token, tls, timeout=600) as client:
        for start in range(0, len(rows), USERS_PER_REQUEST):
            chunk = [user for _, user in rows[start:start + USERS_PER_REQUEST]]
            answer = checked(client.post("/v1/users", json={"user_ids": chunk}))
            for key in totals:
                totals[key] += int(answer[key])
    typer.echo(json.dumps({**totals, "file": str(file)}))


@reported
def identity(
    database_url: Annotated[str | None, typer.Option(help="default: PARTY_DATABASE_URL")] = None,
) -> None:
    """Print this party's Ed25519 identity key, which each peer pins in PARTY_PEER_IDENTITIES (docs/privacy.md §7.1).

    It derives from PARTY_SECRET, or from the secret the party drew and kept in its database (drawn and kept
    now when there is none yet, as the party itself would at its first run).
    """
    from services.config import PartySettings
    from services.crypto.secagg import SecAggParty
    from services.db.session import make_engine, make_sessionmaker
    from services.party.federation import FederationService

    settings = PartySettings()
    engine = make_engine(database_url or settings.database_url)
    try:
        service = FederationService(sessions=make_sessionmaker(engine), party_id=settings.party_id,
                                    rating_min=settings.rating_min, rating_max=settings.rating_max,
                                    secret=bytes.fromhex(settings.secret) if settings.secret else None)
        with service.sessions() as session:
            secret = service.secret(session)
    finally:
        engine.dispose()
    key = SecAggParty(party_id=settings.party_id, secret=secret, run_id="identity").identity
    typer.echo(json.dumps({settings.party_id: key}))


def register(app: typer.Typer) -> None:
    """Attach the party commands to the root CLI."""
    sub = typer.Typer(help="Run a party service and load data into it.", no_args_is_help=True)
    sub.command()(serve)
    sub.command()(migrate)
    sub.command("evaluation-split")(evaluation_split)
    sub.command()(ingest)
    sub.command()(users)
    sub.command()(vacuum)
    sub.command()(identity)
    app.add_typer(sub, name="party")
