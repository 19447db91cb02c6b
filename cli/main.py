"""The `fedrec` console entry point: every shell action a user takes."""

from __future__ import annotations

import typer

from cli import certs, coordinator, data, demo, experiment, openapi, party, privacy, release, schedule

app = typer.Typer(name="fedrec", help="Vertical federated GNN recommender.", no_args_is_help=True)

for module in (party, coordinator, data, experiment, openapi, demo, privacy, certs, release, schedule):
    module.register(app)


if __name__ == "__main__":
    app()
