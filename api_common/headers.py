"""Response headers every answer of both APIs carries: no framing, no content sniffing."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The dashboard is HTML: framed by another site it could be overlaid (clickjacking); a JSON or npz
# answer sniffed as HTML could run script. Both headers cost nothing on the other answers.
SECURITY_HEADERS = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"))
FRAME_ANCESTORS = b"frame-ancestors 'none'"


_REPLACED = frozenset(k for k, _ in SECURITY_HEADERS)
_CSP = b"content-security-policy"


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An answer's headers with SECURITY_HEADERS (a route's own values replaced) and `frame-ancestors 'none'`
    in its CSP (a route's own policy kept), or a CSP of that alone."""
    out, seen = [], False
    for key, value in headers:
        lower = key.lower()
        if lower in _REPLACED:
            continue
        if lower == _CSP:
            seen = True
            if b"frame-ancestors" not in value:
                value = value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS
        out.append((key, value))
    out += SECURITY_HEADERS
    if not seen:
        out.append((_CSP, FRAME_ANCESTORS))
    return out


class SecurityHeaders:
    """Pure ASGI middleware adding SECURITY_HEADERS and a frame-ancestors CSP to every HTTP answer.

    The services add the same headers in their observability layer (one response wrapper per request);
    this middleware is for an app without it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = with_security_headers(list(message.get("headers", [])))
            await send(message)

        await self.app(scope, receive, send_with_headers)
