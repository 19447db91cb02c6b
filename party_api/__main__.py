"""`python -m party_api [--host H] [--port P]`: migrate the database, then serve."""

from __future__ import annotations

import argparse

import uvicorn

from party_api.main import create_app
from services.config import PartySettings
from services.db.session import migrate


def main(argv: list[str] | None = None) -> None:
    """Read settings from the environment (PARTY_*), run migrations, start uvicorn."""
    parser = argparse.ArgumentParser(prog="python -m party_api", description=__doc__)
    parser.add_argument("--host", help="bind address (default: PARTY_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: PARTY_PORT or 8001)")
    args = parser.parse_args(argv)
    # --host goes through the settings so dev mode's loopback-only rule sees it.
    settings = PartySettings(**({"host": args.host} if args.host else {}))  # type: ignore[arg-type]
    migrate(settings.database_url)
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=args.port or settings.port, log_level="info")


if __name__ == "__main__":
    main()
