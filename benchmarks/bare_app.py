"""`python -m benchmarks.bare_app --port P`: the floor benchmarks/serving.py compares the party with.

A FastAPI app with one route, `GET /health`, and nothing else (no middleware, no credential, no
logging per request), served by uvicorn with one worker and the same HTTP implementation (httptools)
as the party, on loopback.
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
async def health() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@app.get("/ready")
async def ready() -> dict[str, str]:
    """Ready as soon as it listens (the benchmark waits on it)."""
    return {"status": "ready"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, workers=1, http="httptools", log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
