"""`fedrec privacy-report RUN`: a run's privacy mechanisms and the attack figures measured against them."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.coordinator import TokenOpt, UrlOpt
from cli.coordinator import client as coordinator_client
from cli.http import Tls, checked, reported

out = Console()
err = Console(stderr=True)


def _run_status(url: str, token: str | None, run_id: str, tls: Tls) -> dict[str, Any]:
    """GET /v1/runs/{run_id} with the admin token."""
    with coordinator_client(url, token, tls) as c:
        return dict(checked(c.get(f"/v1/runs/{run_id}")))


def _mechanisms(record: dict[str, Any]) -> Table:
    table = Table("mechanism", "enabled", "parameters")
    for name, params in record.items():
        rest = ", ".join(f"{k}={v}" for k, v in params.items() if k != "enabled")
        table.add_row(name, str(params.get("enabled", "-")), rest)
    return table


def _figures(measured: dict[str, Any], protocol: str) -> Table:
    rows = {protocol: measured, **measured["baseline"]}
    shares = sorted(measured["deanonymization_f1"])
    table = Table("protocol", *[f"de-anon. F1 @{s}" for s in shares], *[f"gradient F1 @{s}" for s in shares],
                  f"multi-round de-anon. F1 @{shares[-1]} (popularity guess)", "coordinator F1 (popularity guess)",
                  "test RMSE")
    for name, row in rows.items():
        multi = "-"
        if "deanonymization_multiround_f1" in row:
            multi = (f"{row['deanonymization_multiround_f1'][shares[-1]]:.3f} "
                     f"({row['deanonymization_multiround_popularity_f1'][shares[-1]]:.3f})")
        table.add_row(name, *[f"{row['deanonymization_f1'][s]:.3f}" for s in shares],
                      *[f"{row['gradient_f1'][s]:.3f}" for s in shares], multi,
                      f"{row['coordinator_f1']:.3f} ({row['coordinator_popularity_f1']:.3f})", f"{row['rmse']:.4f}")
    return table


@reported
def privacy_report(
    run_id: str, url: UrlOpt = "http://127.0.0.1:8000", token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    *, tls: Tls,
) -> None:
    """Show a run's privacy mechanisms, their parameters and the attack F1 measured on a reference data set."""
    run = _run_status(url, token, run_id, tls)
    report = run["privacy_report"]
    if as_json:
        out.print_json(data=report)
        return
    out.print(f"run {run['run_id']}: {run['state']}")
    out.print(_mechanisms(report["mechanisms"]))
    measured = report["measured"]
    if measured is None:
        out.print(report.get("note", "no measured figures"))
        return
    out.print(f"measured against the same mechanisms ({report['protocol']}) on {measured['reference_data']}, "
              f"{measured['measured_at']}:\n  {measured['produced_by']}")
    out.print(_figures(measured, report["protocol"]))
    if not measured["settings_match"]:
        out.print("[yellow]this run's parameters differ from the measured ones:[/yellow]")
        for line in measured["differences"]:
            out.print(f"  {line}")


def register(app: typer.Typer) -> None:
    """Attach `fedrec privacy-report` to the root CLI."""
    app.command("privacy-report")(privacy_report)
