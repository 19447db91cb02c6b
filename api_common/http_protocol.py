"""uvicorn's HTTP/1.1 protocol with a deadline on request headers and a cap on their size (slowloris).

uvicorn times out idle keep-alive connections only: a connection that sends `GET / HTTP/1.1\r\n`
and then one header byte every few seconds (or nothing) stays open for good, without any credential,
until the server runs out of sockets. Here a request's headers must be complete within
`header_timeout_s` of its first byte (of the connection, for the first request) and within
`max_header_bytes`; otherwise the connection is answered 408 or 431 and closed. One client address
may hold at most `max_per_address` open connections (trusted proxies exempt): past it a connection
is answered 503 and closed before anything is read. Body reads are bounded by the request guard
(api_common.guard), which knows when the app is waiting for a body.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Sequence
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _raw_answer(status: int, reason: str, detail: str) -> bytes:
    body = ('{"code": "%s", "detail": "%s"}' % (reason.lower().replace(" ", "_"), detail)).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class AddressSlots:
    """Open connections per client address in one process; addresses of trusted proxies are not counted."""

    def __init__(self, *, per_address: int, exempt: Sequence[str] = ()) -> None:
        self.per_address = per_address
        self.exempt = [ipaddress.ip_network(e, strict=False) for e in exempt]
        self.open: dict[str, int] = {}

    def _exempt(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.exempt)

    def take(self, address: str) -> bool:
        """Count a new connection of the address; False (not counted) when it already holds its share."""
        held = self.open.get(address, 0)
        if held >= self.per_address and not self._exempt(address):
            return False
        self.open[address] = held + 1
        return True

    def give_back(self, address: str) -> None:
        """The connection closed."""
        held = self.open.get(address, 0) - 1
        if held > 0:
            self.open[address] = held
        else:
            self.open.pop(address, None)


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol plus a header deadline, a header size cap and a per-address connection cap."""

    def __init__(self, *args: Any, header_timeout_s: float = 10.0, max_header_bytes: int = 64 << 10,
                 slots: AddressSlots | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s, self.max_header_bytes = header_timeout_s, max_header_bytes
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes: int | None = None  # bytes of the request whose headers are incomplete
        self._slots = slots
        self._address: str | None = None  # the address whose slot this connection holds

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_raw_answer(status, reason, detail))
            self.transport.close()

    def _headers_timed_out(self) -> None:
        self._deadline = None
        self._refuse(408, "Request Timeout", f"request headers not complete within {self.header_timeout_s:g} s")

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        if self._slots is not None and self.client is not None:
            if not self._slots.take(self.client[0]):
                # Refused before a byte is read: the slot limit of uvicorn (max_connections) stays for others.
                self._refuse(503, "Service Unavailable", "too many connections from this address")
                return
            self._address = self.client[0]
        self._arm()  # a connection that sends nothing at all is bounded too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._slots is not None and self._address is not None:
            self._slots.give_back(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_bytes is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        # Still incomplete after this chunk: every byte counted so far belongs to the headers.
        if self._header_bytes is not None and self._header_bytes > self.max_header_bytes:
            self._refuse(431, "Request Header Fields Too Large",
                         f"request headers exceed {self.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0 if self._header_bytes is None else self._header_bytes
        self._arm()  # the next request on a kept-alive connection: its own deadline from its first byte

    def on_headers_complete(self) -> None:
        self._disarm()
        self._header_bytes = None
        super().on_headers_complete()


def deadline_protocol(*, header_timeout_s: float, max_header_bytes: int, max_per_address: int | None = None,
                      exempt: Sequence[str] = ()) -> Any:
    """The `http=` option of uvicorn.Config / uvicorn.run (a partial, so it survives worker spawning; each
    worker process counts its own connections)."""
    slots = None if max_per_address is None else AddressSlots(per_address=max_per_address, exempt=exempt)
    return functools.partial(DeadlineHttpToolsProtocol, header_timeout_s=header_timeout_s,
                             max_header_bytes=max_header_bytes, slots=slots)
