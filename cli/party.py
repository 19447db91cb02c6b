"""`fedrec party` sub-commands: serve, migrate, ingest a file into a running party."""

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

from services.errors import DomainError, raise_for

err = Console(stderr=True)


class FileFormat(str, Enum):
    """Input formats `fedrec party ingest` understands."""

    csv = "csv"
    ndjson = "ndjson"
    ml100k = "ml100k"  # u.data: user \t item \t rating \t timestamp
    filmtrust = "filmtrust"  # ratings.txt / trust.txt: whitespace-separated, no header


class Kind(str, Enum):
    """What the file holds."""

    interactions = "interactions"
    social_links = "social-links"


HEADERS = {
    (FileFormat.ml100k, Kind.interactions): ["user_id", "item_id", "rating", "timestamp"],
    (FileFormat.filmtrust, Kind.interactions): ["user_id", "item_id", "rating"],
    (FileFormat.filmtrust, Kind.social_links): ["src_user_id", "dst_user_id", "weight"],
}


def serve(
    host: Annotated[str | None, typer.Option(help="bind address (default PARTY_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default PARTY_PORT)")] = None,
) -> None:
    """Run the party's migrations, then serve its API (settings from PARTY_* variables)."""
    from party_api.__main__ import main

    args = [*(["--host", host] if host else []), *(["--port", str(port)] if port else [])]
    main(args)


def migrate(
    database_url: Annotated[str | None, typer.Option(help="default: PARTY_DATABASE_URL")] = None,
) -> None:
    """Bring the party database to the current schema."""
    from services.config import PartySettings
    from services.db.session import migrate as run

    url = database_url or PartySettings().database_url
    run(url)
    err.print(f"party database at head: {url}")


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


def ingest(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="file to upload")],
    url: Annotated[str, typer.Option(help="party base URL")] = "http://127.0.0.1:8001",
    token: Annotated[str, typer.Option(envvar="PARTY_ADMIN_TOKEN", help="admin token")] = "",
    fmt: Annotated[FileFormat, typer.Option("--format", help="input format")] = FileFormat.csv,
    kind: Annotated[Kind, typer.Option(help="what the file holds")] = Kind.interactions,
    chunk_rows: Annotated[
        int, typer.Option(min=1, help="rows per request (each atomic)")
    ] = 100_000,
) -> None:
    """Stream a file to a running party's bulk endpoint, one atomic request per chunk."""
    media = "application/x-ndjson" if fmt is FileFormat.ndjson else "text/csv"
    endpoint = f"{url.rstrip('/')}/v1/{kind.value}/bulk"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": media}
    stored = 0
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    ]
    with (
        file.open("rb") as raw,
        httpx.Client(timeout=600) as client,
        Progress(*columns, console=err) as bar,
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


def register(app: typer.Typer) -> None:
    """Attach the party commands to the root CLI."""
    sub = typer.Typer(help="Run a party service and load data into it.", no_args_is_help=True)
    sub.command()(serve)
    sub.command()(migrate)
    sub.command()(ingest)
    app.add_typer(sub, name="party")
