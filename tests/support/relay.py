"""A reverse relay that opens a new connection for every request it passes on (no keep-alive behind it).

Put in front of a party, it makes every federation step of a run reach the party on a fresh TCP
connection, so a multi-worker party is tested against steps landing on any worker, not against
the luck of one keep-alive connection carrying a whole run.
"""

from __future__ import annotations

from typing import Any

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length", "content-encoding"}


class FreshConnectionRelay:
    """ASGI app: each request is sent to `target` by a client of its own, with `Connection: close`."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.forwarded = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.decode().lower() not in HOP_BY_HOP]
        query = scope.get("query_string") or b""
        url = self.target + scope["raw_path"].decode() + (f"?{query.decode()}" if query else "")
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:  # a new pool: a new connection
            answer = await client.request(scope["method"], url, content=body,
                                          headers=[*headers, (b"connection", b"close")])
        self.forwarded += 1
        kept = [(k, v) for k, v in answer.headers.raw if k.decode().lower() not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
        await send({"type": "http.response.body", "body": answer.content})
