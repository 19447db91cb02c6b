"""`fedrec coordinator serve|migrate|register-party|create|status|cancel` and `fedrec run create|status|cancel`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from cli.http import checked
from services.errors import Conflict, DomainError

out = Console()
err = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option(envvar="FEDREC_COORDINATOR_URL", help="coordinator base URL")]
TokenOpt = Annotated[str | None, typer.Option(envvar="COORD_ADMIN_TOKEN", help="admin token (default COORD_ADMIN_TOKEN)")]


def _client(url: str, token: str | None) -> httpx.Client:
    if not token:
        raise typer.BadParameter("an admin token is required (--token or COORD_ADMIN_TOKEN)")
    return httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=60)


@contextmanager
def _reported() -> Iterator[None]:
    """An error answer inside the block is printed as `code: detail` and ends the command (exit 1)."""
    try:
        yield
    except DomainError as exc:
        err.print(f"[red]{exc.extra.get('code', exc.code)}[/red] {exc.detail}")
        raise typer.Exit(1) from exc


def _check(resp: httpx.Response) -> dict[str, Any]:
    """The answer's JSON; an error answer is reported and ends the command."""
    with _reported():
        return dict(checked(resp))


def serve(host: Annotated[str, typer.Option()] = "127.0.0.1", port: Annotated[int, typer.Option()] = 8000) -> None:
    """Run the coordinator's migrations, then serve its API (settings from COORD_* variables)."""
    from coordinator_api.__main__ import main
    main(["--host", host, "--port", str(port)])


def migrate(database_url: Annotated[str | None, typer.Option(help="default: COORD_DATABASE_URL")] = None) -> None:
    """Bring the coordinator database to the current schema."""
    from services.db.session import upgrade
    url = database_url or os.environ.get("COORD_DATABASE_URL") or "sqlite:///./var/coordinator.db"
    upgrade(url, environment="coordinator")
    err.print(f"coordinator database at head: {url}")


def register_party(
    party_id: str, party_url: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    party_token: Annotated[str, typer.Option(envvar="PARTY_COORDINATOR_TOKEN", help="credential the party expects")] = "",
) -> None:
    """Register a party (or re-point it if already registered)."""
    with _client(url, token) as c, _reported():
        try:
            party = checked(c.post("/v1/parties", json={"party_id": party_id, "url": party_url, "token": party_token}))
        except Conflict:  # already registered: re-point it
            party = checked(c.patch(f"/v1/parties/{party_id}", json={"url": party_url, "token": party_token}))
    out.print_json(data=party)


def create(
    url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    rounds: Annotated[int, typer.Option(min=1)] = 20, min_parties: Annotated[int, typer.Option(min=1)] = 2,
    seed: int = 0, config: Annotated[str, typer.Option(help="engine settings as JSON, e.g. '{\"dim\": 8}'")] = "{}",
    wait: Annotated[bool, typer.Option(help="follow the run until it ends")] = False,
) -> None:
    """Create a training run (202) and optionally follow it."""
    with _client(url, token) as c:
        run = _check(c.post("/v1/runs", json={"rounds": rounds, "min_parties": min_parties, "seed": seed,
                                              "config": json.loads(config)}))
        out.print(f"run {run['run_id']} {run['state']}")
        while wait and run["state"] not in ("completed", "failed", "cancelled"):
            time.sleep(1.0)
            run = _check(c.get(f"/v1/runs/{run['run_id']}"))
            out.print(f"{run['state']}: {run['rounds_done']}/{run['rounds_total']} {run['detail']}")


def status(run_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None) -> None:
    """Show a run: state, rounds, per-round metrics and bytes per party."""
    with _client(url, token) as c:
        run = _check(c.get(f"/v1/runs/{run_id}"))
    out.print(f"run {run['run_id']}: {run['state']} ({run['rounds_done']}/{run['rounds_total']}) {run['detail']}")
    table = Table("round", "participants", "failures", "train RMSE", "valid RMSE", "test RMSE", "seconds")
    for r in run["rounds"]:
        m = r["metrics"]
        table.add_row(str(r["round_index"]), ",".join(r["participants"]), ",".join(r["failures"]) or "-",
                      *[f"{m[k]:.4f}" if k in m else "-" for k in ("train_rmse", "valid_rmse", "test_rmse")],
                      f"{r['seconds']:.2f}")
    out.print(table)
    out.print({"bytes_sent": run["bytes_sent"], "bytes_received": run["bytes_received"]})


def cancel(run_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None) -> None:
    """Cancel a run."""
    with _client(url, token) as c:
        run = _check(c.post(f"/v1/runs/{run_id}/cancel"))
    out.print(f"run {run['run_id']}: {run['state']}")


def register(app: typer.Typer) -> None:
    """Attach `fedrec coordinator ...` and `fedrec run ...` to the root CLI."""
    coord = typer.Typer(help="coordinator service: serve, migrate, register parties.", no_args_is_help=True)
    coord.command("serve")(serve)
    coord.command("migrate")(migrate)
    coord.command("register-party")(register_party)
    for name, command in (("create", create), ("status", status), ("cancel", cancel)):
        coord.command(name)(command)  # same as `fedrec run ...`, next to the other coordinator commands
    app.add_typer(coord, name="coordinator")
    run = typer.Typer(help="training runs on a coordinator (over HTTP).", no_args_is_help=True)
    run.command("create")(create)
    run.command("status")(status)
    run.command("cancel")(cancel)
    app.add_typer(run, name="run")
