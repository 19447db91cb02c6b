"""`fedrec release list|show|activate`: the coordinator's releases (admin token)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from cli.coordinator import TokenOpt, UrlOpt, client, out
from cli.http import Tls, checked, reported


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@reported
def list_releases(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """List the releases, newest first, with state and pooled validation RMSE and NDCG@10."""
    with client(url, token, tls) as c:
        listed = checked(c.get("/v1/releases"))
    table = Table("release", "state", "run", "round", "valid RMSE", "valid NDCG@10", "created", "reason")
    table.columns[0].no_wrap = True
    for r in listed:
        table.add_row(r["release_id"], r["state"], r["run_id"], str(r["round_index"]), _figure(r["valid_rmse"]),
                      _figure(r.get("valid_ndcg")), r["created_at"][:19], escape(r["reason"]))
    out.print(table if listed else "no releases")


@reported
def show(release_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """Show one release as JSON."""
    with client(url, token, tls) as c:
        out.print_json(data=checked(c.get(f"/v1/releases/{release_id}")))


@reported
def activate(release_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
             force: Annotated[bool, typer.Option(help="override the promotion gate")] = False, *, tls: Tls) -> None:
    """Serve a release at every party (a retired one: rollback; a staged one passes the gate unless --force)."""
    with client(url, token, tls) as c:
        row = checked(c.post(f"/v1/releases/{release_id}/activate", json={"force": force}))
    out.print(f"release {row['release_id']}: {row['state']} ({escape(row['reason'])})")


def register(app: typer.Typer) -> None:
    """Attach `fedrec release ...` to the root CLI."""
    release = typer.Typer(help="releases of the federation's model (list, show, activate/rollback).",
                          no_args_is_help=True)
    release.command("list")(list_releases)
    release.command("show")(show)
    release.command("activate")(activate)
    app.add_typer(release, name="release")
