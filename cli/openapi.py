"""`fedrec openapi`: write the OpenAPI document of the party or coordinator API to a file."""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from services.config import CoordinatorSettings, PartySettings

Service = Literal["party", "coordinator"]
_APPS = {"party": "party_api.main", "coordinator": "coordinator_api.main"}


class AppUnavailable(RuntimeError):
    """The API package of a service cannot be imported (not installed or not written yet)."""


def build_spec(service: Service, *, data_dir: Path) -> dict[str, Any]:
    """OpenAPI document of a service app built with dev settings and a throw-away SQLite URL."""
    module_name = _APPS[service]
    try:
        module = importlib.import_module(module_name)
        create_app = module.create_app
    except (ImportError, AttributeError) as exc:
        raise AppUnavailable(f"{module_name}.create_app is not available: {exc}") from exc
    # Building the schema never runs the lifespan, so the database is never opened.
    url = f"sqlite:///{data_dir / f'{service}.db'}"
    settings: PartySettings | CoordinatorSettings
    if service == "party":
        settings = PartySettings(dev_mode=True, database_url=url, data_dir=data_dir)
    else:
        settings = CoordinatorSettings(dev_mode=True, database_url=url, data_dir=data_dir)
    spec: dict[str, Any] = create_app(settings).openapi()
    return spec


def export(service: Service, out: Path) -> dict[str, Any]:
    """Build a service's OpenAPI document and write it as pretty JSON to `out`."""
    with tempfile.TemporaryDirectory(prefix="fedrec-openapi-") as tmp:
        spec = build_spec(service, data_dir=Path(tmp))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return spec


def _command(service: Service) -> Any:
    """A typer command exporting one service's spec."""

    def command(out: Annotated[Path, typer.Option(help="output JSON file")]) -> None:
        try:
            spec = export(service, out)
        except AppUnavailable as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=1) from None
        n_ops = sum(len(v) for v in spec.get("paths", {}).values())
        typer.echo(
            f"wrote {out} ({len(spec.get('paths', {}))} paths, {n_ops} operations)", err=True
        )

    command.__doc__ = f"Write the {service} API's OpenAPI JSON to a file."
    return command


def register(app: typer.Typer) -> None:
    """Attach the openapi commands to the root CLI."""
    sub = typer.Typer(help="Export the OpenAPI documents of the services.", no_args_is_help=True)
    sub.command("party")(_command("party"))
    sub.command("coordinator")(_command("coordinator"))
    app.add_typer(sub, name="openapi")
