"""`python -m coordinator_api [--host H] [--port P]`: migrate the database, then serve."""

from __future__ import annotations

import argparse

import uvicorn

from api_common.observability import uvicorn_options
from coordinator_api.main import create_app
from services.config import CoordinatorSettings, settings_or_exit
from services.db.session import owner_only_dir, upgrade


def main(argv: list[str] | None = None) -> None:
    """Read settings from the environment (COORD_*), run migrations, start uvicorn."""
    parser = argparse.ArgumentParser(prog="python -m coordinator_api", description=__doc__)
    parser.add_argument("--host", help="bind address (default: COORD_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: COORD_PORT or 8000)")
    args = parser.parse_args(argv)
    # --host goes through the settings so dev mode's loopback-only rule sees it.
    settings = settings_or_exit(CoordinatorSettings, **({"host": args.host} if args.host else {}))
    owner_only_dir(settings.data_dir)
    upgrade(settings.database_url, environment="coordinator")
    options = uvicorn_options(log_format=settings.log_format, cert=settings.tls_cert_file, key=settings.tls_key_file,
                              client_ca=settings.tls_client_ca_file, guard=settings)
    uvicorn.run(create_app(settings), host=settings.host, port=args.port or settings.port, log_level="info",
                **options)


if __name__ == "__main__":
    main()
