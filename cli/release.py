"""`fedrec release list|show|activate`: the coordinator's releases (admin token)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.coordinator import TokenOpt, UrlOpt, client, out
from cli.http import Tls, checked, reported


def _figure(value: float | None, *, withheld: object = None) -> str:
    """A figure; "withheld (DP)" for a missing one the parties withheld under differential privacy."""
    if value is None:
        return "withheld (DP)" if withheld else "-"
    return f"{value:.4f}"


def withheld_line(withheld: dict[str, str]) -> str:
    """Which parties withheld their validation figures under DP, and why (each distinct reason once)."""
    reasons = "; ".join(sorted(set(withheld.values())))
    return f"value report and served validation errors withheld under DP at {', '.join(sorted(withheld))} ({reasons})"


@reported
def list_releases(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """List the releases, newest first, with state and pooled validation RMSE and NDCG@10."""
    with client(url, token, tls) as c:
        listed = checked(c.get("/v1/releases"))
    table = Table("release", "state", "run", "round", "valid RMSE", "valid NDCG@10", "created", "reason")
    table.columns[0].no_wrap = True
    for r in listed:
        held = r.get("value_withheld")
        table.add_row(r["release_id"], r["state"], r["run_id"], str(r["round_index"]),
                      _figure(r["valid_rmse"], withheld=held), _figure(r.get("valid_ndcg"), withheld=held),
                      r["created_at"][:19], escape(r["reason"]))
    out.print(table if listed else "no releases")


def value_table(report: dict[str, list[dict[str, Any]]]) -> Table:
    """The value report as a table: per party and slice, validation NDCG@10 alone, federated, served."""
    table = Table("party", "slice", "users", "alone (EASE)", "federated", "served", "served vs alone",
                  title="value report: validation NDCG@10 per slice of each party's users")
    for party, rows in sorted(report.items()):
        for r in rows:
            gain = r["served_ndcg10"] - r["local_ndcg10"]
            table.add_row(party, r["slice"], str(r["users"]), _figure(r["local_ndcg10"]),
                          _figure(r["federated_ndcg10"]), _figure(r["served_ndcg10"]), f"{gain:+.4f}")
    return table


@reported
def show(release_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
         as_json: Annotated[bool, typer.Option("--json", help="the whole record as JSON")] = False, *,
         tls: Tls) -> None:
    """Show one release: its record, then its value report as a table (--json: the record as JSON)."""
    with client(url, token, tls) as c:
        row = checked(c.get(f"/v1/releases/{release_id}"))
    if as_json:
        out.print_json(data=row)
        return
    out.print(f"release {row['release_id']}: {row['state']} ({escape(row['reason'])})")
    held = row.get("value_withheld")
    out.print(f"run {row['run_id']} round {row['round_index']}, valid RMSE {_figure(row['valid_rmse'], withheld=held)}"
              f", valid NDCG@10 {_figure(row.get('valid_ndcg'), withheld=held)}")
    report = row.get("value_report")
    if held:
        out.print(escape(withheld_line(held)))
    if report or not held:
        out.print(value_table(report) if report else "no value report (no party reported one)")


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
