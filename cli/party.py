"""`fedrec party` sub-commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the party commands to the root CLI."""
    sub = typer.Typer(help="party commands (not yet implemented).", no_args_is_help=True)
    app.add_typer(sub, name="party")
