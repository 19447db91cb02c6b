"""`python -m tests.support.dying_party --port P`: a real party process that SIGKILLs itself mid-round.

The party service of `party_api`, unchanged, behind an ASGI wrapper: when a request path ends with
$DIE_AT (e.g. "/rounds/3/steps/projection?attempt=0&layer=1"), the process kills itself with SIGKILL before answering,
so a test can crash a party at an exact step of a round (no cleanup, like any crash).
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import uvicorn

from party_api.main import create_app
from services.config import PartySettings
from services.db.session import migrate


class DieAt:
    """ASGI wrapper: SIGKILL this process on the first request whose path (with its query) ends with `suffix`."""

    def __init__(self, app: Any, suffix: str) -> None:
        self.app, self.suffix = app, suffix

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope["path"] + "?" + scope.get("query_string", b"").decode()).endswith(
                self.suffix):
            os.kill(os.getpid(), signal.SIGKILL)
        await self.app(scope, receive, send)


def main() -> None:
    """Serve the party API until the fatal request arrives."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    settings = PartySettings()
    migrate(settings.database_url)
    uvicorn.run(DieAt(create_app(settings), os.environ["DIE_AT"]), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
