"""Response headers every answer of both APIs carries: no framing, no content sniffing."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The dashboard is HTML: framed by another site it could be overlaid (clickjacking); a JSON or npz
# answer sniffed as HTML could run script. Both headers cost nothing on the other answers.
SECURITY_HEADERS = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"))
FRAME_ANCESTORS = b"frame-ancestors 'none'"


def _with_csp(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Add `frame-ancestors 'none'` to the answer's CSP (a route's own policy kept), or set it alone."""
    out, seen = [], False
    for key, value in headers:
        if key.lower() == b"content-security-policy":
            seen = True
            if b"frame-ancestors" not in value:
                value = value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS
        out.append((key, value))
    return out if seen else [*out, (b"content-security-policy", FRAME_ANCESTORS)]


class SecurityHeaders:
    """Pure ASGI middleware adding SECURITY_HEADERS and a frame-ancestors CSP to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in dict(SECURITY_HEADERS)]
                message["headers"] = _with_csp([*headers, *SECURITY_HEADERS])
            await send(message)

        await self.app(scope, receive, send_with_headers)
