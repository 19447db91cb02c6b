"""`fedrec schedule add|list|rm`: the coordinator's run schedules (admin token)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.coordinator import TokenOpt, UrlOpt, client, out
from cli.http import CliError, Tls, checked, reported


@reported
def add(
    url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    cron: Annotated[str | None, typer.Option(help="five-field crontab expression in UTC, e.g. '0 3 * * *'")] = None,
    interval: Annotated[int | None, typer.Option(min=1, help="fire every this many seconds (instead of --cron)")]
    = None,
    preset: Annotated[str | None, typer.Option(help="named settings: tuned-ranking (default), tuned (RMSE), "
                                                    "verfedgnn-paper")] = None,
    rounds: Annotated[int | None, typer.Option(min=1, help="at most this many rounds (default: the preset's cap)")]
    = None,
    min_parties: Annotated[int | None, typer.Option(min=1, help="default 2, as for `fedrec coordinator create`")]
    = None,
    seed: Annotated[int | None, typer.Option(min=0, help="default 0")] = None,
    config: Annotated[str | None, typer.Option(help="settings that override the preset's, as JSON, e.g. "
                                                    "'{\"dim\": 8}'")] = None,
    party_ids: Annotated[str | None, typer.Option(help="comma-separated party ids (default: all enabled at firing)")]
    = None,
    warm_start: Annotated[bool, typer.Option(help="each run starts from the release active when it fires")] = False,
    *, tls: Tls,
) -> None:
    """Add a schedule that starts a run with these settings on a cron expression or every --interval seconds."""
    body: dict[str, Any] = {}
    if config is not None:
        try:
            body["config"] = json.loads(config)
        except ValueError as exc:
            raise CliError(f"--config is not JSON ({exc})") from None
    if warm_start:
        body["warm_start"] = True
    if party_ids is not None:
        body["party_ids"] = [p.strip() for p in party_ids.split(",") if p.strip()]
    body.update({k: v for k, v in (("cron", cron), ("interval_seconds", interval), ("preset", preset),
                                   ("rounds", rounds), ("min_parties", min_parties), ("seed", seed))
                 if v is not None})
    with client(url, token, tls) as c:
        row = checked(c.post("/v1/schedules", json=body))
    out.print(f"schedule {row['schedule_id']}: next firing {row['next_fire_at'] or '-'}")


@reported
def list_schedules(url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """List the schedules with their timing and firing record."""
    with client(url, token, tls) as c:
        listed = checked(c.get("/v1/schedules"))
    table = Table("schedule", "when", "fired", "skipped", "last fired", "last outcome", "next")
    table.columns[0].no_wrap = True
    for r in listed:
        when = f"cron {r['cron']}" if r["cron"] else f"every {r['interval_seconds']}s"
        table.add_row(r["schedule_id"], escape(when), str(r["fire_count"]), str(r["skipped_count"]),
                      (r["last_fired_at"] or "-")[:19], escape(r["last_outcome"] or "-"),
                      (r["next_fire_at"] or "-")[:19])
    out.print(table if listed else "no schedules")


@reported
def rm(schedule_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None, *, tls: Tls) -> None:
    """Delete a schedule (the runs it started are kept)."""
    with client(url, token, tls) as c:
        checked(c.delete(f"/v1/schedules/{schedule_id}"))
    out.print(f"schedule {schedule_id} deleted")


def register(app: typer.Typer) -> None:
    """Attach `fedrec schedule ...` to the root CLI."""
    schedule = typer.Typer(help="schedules that start runs (add, list, rm).", no_args_is_help=True)
    schedule.command("add")(add)
    schedule.command("list")(list_schedules)
    schedule.command("rm")(rm)
    app.add_typer(schedule, name="schedule")
