"""`python -m party_api [--host H] [--port P] [--workers N] [--role all|api|federation]`: migrate, then serve."""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn
from fastapi import FastAPI
from threadpoolctl import threadpool_limits

from api_common.observability import configure_json_logging, uvicorn_options
from party_api.main import create_app
from party_api.supervise import FederationProcess, free_loopback_port
from services.config import PartySettings, settings_or_exit
from services.db.session import migrate, owner_only_dir

GIL_SWITCH_S = 0.0005


def single_threaded_blas() -> None:
    """numpy's BLAS on one thread: serving runs many small products at once in the request threadpool,
    where multi-threaded BLAS calls fight each other for the cores (12 ms instead of 1 ms a top-K).

    And a short GIL switch interval: scoring runs on the serving executor's threads, and with the event
    loop busy each hand-off waited for the loop to drop the GIL, every 5 ms by default, which capped a
    loaded process at some 200 top-K answers a second whatever the work cost.
    """
    threadpool_limits(limits=1, user_api="blas")
    sys.setswitchinterval(float(os.environ.get("FEDREC_SWITCH_S", GIL_SWITCH_S)))


def app_from_env() -> FastAPI:
    """The app built from PARTY_* variables (uvicorn calls it in each worker process)."""
    single_threaded_blas()
    settings = settings_or_exit(PartySettings)
    if settings.log_format == "json":
        configure_json_logging()  # a spawned worker does not inherit the parent's logging setup
    return create_app(settings)


def main(argv: list[str] | None = None) -> None:
    """Read settings from the environment (PARTY_*), run migrations, start uvicorn."""
    parser = argparse.ArgumentParser(prog="python -m party_api", description=__doc__)
    parser.add_argument("--host", help="bind address (default: PARTY_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: PARTY_PORT or 8001)")
    parser.add_argument("--workers", type=int, help="worker processes (default: PARTY_WORKERS or 1)")
    parser.add_argument("--role", choices=["all", "api", "federation"],
                        help="process role (default: PARTY_PROCESS_ROLE or all; see docs/architecture.md)")
    args = parser.parse_args(argv)
    # --host, --workers and --role go through the settings so their rules (dev mode on loopback only,
    # one federation process) see them.
    given = {"host": args.host, "workers": args.workers, "process_role": args.role}
    settings = settings_or_exit(PartySettings, **{k: v for k, v in given.items() if v})
    owner_only_dir(settings.data_dir)
    migrate(settings.database_url)
    single_threaded_blas()
    workers = settings.workers
    fed_process: FederationProcess | None = None
    if settings.process_role == "all" and workers > 1:
        # Run state must live in one process: start it, and make the workers API processes forwarding to it.
        fed_process = FederationProcess(port=settings.federation_port or free_loopback_port())
        fed_process.start()
        os.environ.update({"PARTY_PROCESS_ROLE": "api", "PARTY_FEDERATION_URL": fed_process.url,
                           "PARTY_WORKERS": str(workers)})
    else:
        os.environ.update({"PARTY_PROCESS_ROLE": settings.process_role, "PARTY_WORKERS": str(workers)})
    # Several workers share the listening socket; each builds its own app (and serving snapshot).
    app: FastAPI | str = create_app(settings) if workers == 1 else "party_api.__main__:app_from_env"
    options = uvicorn_options(log_format=settings.log_format, cert=settings.tls_cert_file,
                              key=settings.tls_key_file, client_ca=settings.tls_client_ca_file,
                              guard=settings)
    try:
        uvicorn.run(app, host=settings.host, port=args.port or settings.port, workers=workers,
                    factory=workers > 1, log_level="info", **options)
    finally:
        if fed_process is not None:
            fed_process.stop()


if __name__ == "__main__":
    main()
