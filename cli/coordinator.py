"""`fedrec coordinator serve|migrate|register-party|parties|remove-party|create|runs|status|cancel` and `fedrec run ...`."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.http import CliError, Tls, checked, reported, service_client
from services.errors import Conflict

out = Console(width=None if sys.stdout.isatty() else 160)  # tables unwrapped in logs and pipes
err = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option(envvar="FEDREC_COORDINATOR_URL", help="coordinator base URL")]
TokenOpt = Annotated[str | None, typer.Option(envvar="COORD_ADMIN_TOKEN", help="admin token (default COORD_ADMIN_TOKEN)")]
ENDED = ("completed", "failed", "cancelled")


def client(url: str, token: str | None, tls: Tls) -> httpx.Client:
    """A client for the coordinator's admin routes."""
    return service_client(url, tls=tls, service="coordinator", token=token,
                          credential="--token (or COORD_ADMIN_TOKEN), the coordinator's admin token")


def _check(resp: httpx.Response) -> dict[str, Any]:
    """The answer's JSON; an error answer raises the DomainError it names (reported by @reported)."""
    return dict(checked(resp))


@reported
def serve(host: Annotated[str, typer.Option()] = "127.0.0.1", port: Annotated[int, typer.Option()] = 8000) -> None:
    """Run the coordinator's migrations, then serve its API (settings from COORD_* variables)."""
    from coordinator_api.__main__ import main
    main(["--host", host, "--port", str(port)])


@reported
def migrate(database_url: Annotated[str | None, typer.Option(help="default: COORD_DATABASE_URL")] = None) -> None:
    """Bring the coordinator database to the current schema."""
    from services.db.session import upgrade
    url = database_url or os.environ.get("COORD_DATABASE_URL") or "sqlite:///./var/coordinator.db"
    upgrade(url, environment="coordinator")
    err.print(f"coordinator database at head: {url}")


@reported
def register_party(
    party_id: str, party_url: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    party_token: Annotated[str, typer.Option(envvar="PARTY_COORDINATOR_TOKEN", help="credential the party expects")] = "",
    tls_name: Annotated[str | None, typer.Option(help="the name (SAN) the party's TLS certificate must carry, "
                                                      "checked on every connection (default: the URL's host)")] = None,
    *, tls: Tls,
) -> None:
    """Register a party (or re-point it if already registered)."""
    body = {"url": party_url, "token": party_token, **({"tls_name": tls_name} if tls_name else {})}
    with client(url, token, tls) as c:
        try:
            party = checked(c.post("/v1/parties", json={"party_id": party_id, **body}))
        except Conflict:  # already registered: re-point it
            party = checked(c.patch(f"/v1/parties/{party_id}", json=body))
        found = checked(c.post("/v1/parties/check", params={"party_ids": [party_id]}))
    out.print_json(data=party)
    for row in found:
        if not row["ok"]:
            err.print(f"warning: party {row['party_id']} {row['reason']}", markup=False)


@reported
def check(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
          party_ids: Annotated[str | None, typer.Option(help="comma-separated party ids (default: every registered)")]
          = None, *, tls: Tls) -> None:
    """Pre-flight of the parties (reachable, credential, protocol version, data); exits 1 when one fails."""
    with client(url, token, tls) as c:
        found = checked(c.post("/v1/parties/check", params={"party_ids": _party_ids(party_ids) or []}))
    table = Table("party", "ok", "what to fix")
    for row in found:
        table.add_row(row["party_id"], "yes" if row["ok"] else "no", escape(row["reason"]))
    out.print(table if found else "no parties registered")
    if not all(row["ok"] for row in found):
        raise typer.Exit(1)


def _party_ids(value: str | None) -> list[str] | None:
    ids = [p.strip() for p in (value or "").split(",") if p.strip()]
    return ids or None


def _excluded(run: dict[str, Any], shown: set[str]) -> None:
    """Print each party the run left out, once, with its reason."""
    for party, why in sorted((run.get("excluded") or {}).items()):
        if party not in shown:
            out.print(escape(f"left out: {party}: {why}"))
            shown.add(party)


def _bytes(n: int) -> str:
    """A byte count for people (1.2 MB)."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _follow(c: httpx.Client, run: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
    """Poll the run until it ends or `timeout_s` passes, printing each change of its progress and every party
    it leaves out (with why)."""
    deadline, shown, left_out = time.monotonic() + timeout_s, "", set[str]()
    _excluded(run, left_out)
    while run["state"] not in ENDED:
        if time.monotonic() > deadline:
            raise CliError(f"run {run['run_id']} still {run['state']} after {timeout_s:g} s (--wait-timeout); "
                           f"it goes on: follow it with `fedrec coordinator status {run['run_id']}`")
        time.sleep(1.0)
        run = _check(c.get(f"/v1/runs/{run['run_id']}"))
        _excluded(run, left_out)
        line = f"{run['state']}: {run['rounds_done']}/{run['rounds_total']} {run['detail']}"
        if line != shown:
            out.print(escape(line))
            shown = line
    return run


@reported
def create(
    url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    preset: Annotated[str | None, typer.Option(help="named settings: tuned-ranking (default), tuned (RMSE), "
                                                    "verfedgnn-paper")] = None,
    rounds: Annotated[int | None, typer.Option(min=1, help="at most this many rounds (default: the preset's cap; "
                                                        "early stopping on validation)")] = None,
    min_parties: Annotated[int, typer.Option(min=1)] = 2, seed: int = 0,
    config: Annotated[str, typer.Option(help="settings that override the preset's, as JSON, e.g. '{\"dim\": 8}' "
                                             "(docs/engine.md lists them)")] = "{}",
    party_ids: Annotated[str | None, typer.Option(help="comma-separated party ids to train with (default: all enabled)")]
    = None,
    warm_start: Annotated[bool, typer.Option(help="start from the active release's parameters (new users and items "
                                                  "get fresh rows); refused when none is active")] = False,
    max_minutes: Annotated[float | None, typer.Option(min=0.01, help="a time bound: past it the run stops after its "
                                                      "current round and publishes its best round (gated)")] = None,
    publish_on_stop: Annotated[bool, typer.Option(help="a cancelled or timed-out run publishes its best round as a "
                                                       "release (gated)")] = True,
    wait: Annotated[bool, typer.Option(help="follow the run until it ends; exit 1 if it fails or is cancelled")]
    = False,
    wait_timeout: Annotated[float, typer.Option(min=1, help="seconds --wait follows the run before giving up")]
    = 86_400.0,
    *, tls: Tls,
) -> None:
    """Create a training run (202) and optionally follow it."""
    try:
        settings = json.loads(config)
    except ValueError as exc:
        raise CliError(f"--config is not JSON ({exc})") from None
    body: dict[str, Any] = {"min_parties": min_parties, "seed": seed, "config": settings,
                            "party_ids": _party_ids(party_ids)}
    if warm_start:
        body["warm_start"] = True
    if not publish_on_stop:
        body["publish_on_stop"] = False
    body.update({k: v for k, v in (("preset", preset), ("rounds", rounds), ("max_minutes", max_minutes))
                 if v is not None})
    with client(url, token, tls) as c:
        run = _check(c.post("/v1/runs", json=body))
        out.print(f"run {run['run_id']} {run['state']}")
        if wait:
            run = _follow(c, run, timeout_s=wait_timeout)
    if wait and run["state"] != "completed":
        raise CliError(f"run {run['run_id']} {run['state']}: {run['detail'] or 'no reason given'}")


@reported
def status(run_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """Show a run: state, rounds, per-round metrics and bytes per party."""
    with client(url, token, tls) as c:
        run = _check(c.get(f"/v1/runs/{run_id}"))
    out.print(escape(f"run {run['run_id']}: {run['state']} ({run['rounds_done']}/{run['rounds_total']}) "
                     f"{run['detail']}"))
    out.print(escape(f"parties: {', '.join(run['party_ids']) or '-'}"
                     + (f"; {run['n_users']} common users" if run.get("n_users") is not None else "")))
    _excluded(run, set())
    table = Table("round", "participants", "failures", "train RMSE", "valid RMSE", "test RMSE", "valid NDCG@10",
                  "seconds")
    for r in run["rounds"]:
        m = r["metrics"]
        table.add_row(str(r["round_index"]), ",".join(r["participants"]), ",".join(r["failures"]) or "-",
                      *[f"{m[k]:.4f}" if k in m else "-"
                        for k in ("train_rmse", "valid_rmse", "test_rmse", "valid_ndcg@10")],
                      f"{r['seconds']:.2f}")
    out.print(table)
    traffic = Table("party", "sent", "received")
    for party in sorted({*run["bytes_sent"], *run["bytes_received"]}):
        traffic.add_row(party, _bytes(run["bytes_sent"].get(party, 0)), _bytes(run["bytes_received"].get(party, 0)))
    out.print(traffic)


@reported
def cancel(run_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
           publish: Annotated[bool | None, typer.Option("--publish/--no-publish", help="publish the run's best round as "
                                                       "a release (gated) before it ends (default: as created)")]
           = None, *, tls: Tls) -> None:
    """Cancel a run (it publishes its best round, gated, unless --no-publish)."""
    with client(url, token, tls) as c:
        run = _check(c.post(f"/v1/runs/{run_id}/cancel", json={} if publish is None else {"publish": publish}))
    out.print(f"run {run['run_id']}: {run['state']}")


@reported
def runs(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """List the runs, newest first."""
    with client(url, token, tls) as c:
        listed = checked(c.get("/v1/runs"))
    table = Table("run", "state", "rounds", "parties", "created", "detail")
    table.columns[0].no_wrap = True
    for r in listed:
        table.add_row(r["run_id"], r["state"], f"{r['rounds_done']}/{r['rounds_total']}", ",".join(r["party_ids"]),
                      r["created_at"][:19], escape(r["detail"]))
    out.print(table if listed else "no runs")


@reported
def parties(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """List the registered parties."""
    with client(url, token, tls) as c:
        listed = checked(c.get("/v1/parties"))
    table = Table("party", "url", "role", "enabled")
    for p in listed:
        table.add_row(p["party_id"], p["url"], p["role"], "yes" if p["enabled"] else "no")
    out.print(table if listed else "no parties registered")


@reported
def remove_party(party_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """Remove a party from the registry (runs that already selected it keep its id in their record)."""
    with client(url, token, tls) as c:
        checked(c.delete(f"/v1/parties/{party_id}"))
    out.print(f"party {party_id} removed")


def register(app: typer.Typer) -> None:
    """Attach `fedrec coordinator ...` and `fedrec run ...` to the root CLI."""
    coord = typer.Typer(help="coordinator service: serve, migrate, register parties.", no_args_is_help=True)
    coord.command("serve")(serve)
    coord.command("migrate")(migrate)
    coord.command("register-party")(register_party)
    coord.command("parties")(parties)
    coord.command("remove-party")(remove_party)
    coord.command("check")(check)
    coord.command("runs")(runs)
    for name, command in (("create", create), ("status", status), ("cancel", cancel)):
        coord.command(name)(command)  # same as `fedrec run ...`, next to the other coordinator commands
    app.add_typer(coord, name="coordinator")
    run = typer.Typer(help="training runs on a coordinator (over HTTP).", no_args_is_help=True)
    run.command("create")(create)
    run.command("status")(status)
    run.command("cancel")(cancel)
    run.command("list")(runs)
    app.add_typer(run, name="run")
