"""`fedrec openapi` sub-commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the openapi commands to the root CLI."""
    sub = typer.Typer(help="openapi commands (not yet implemented).", no_args_is_help=True)
    app.add_typer(sub, name="openapi")
