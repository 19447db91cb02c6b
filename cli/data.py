"""`fedrec data` sub-commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the data commands to the root CLI."""
    sub = typer.Typer(help="data commands (not yet implemented).", no_args_is_help=True)
    app.add_typer(sub, name="data")
