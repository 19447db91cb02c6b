"""uvicorn's HTTP/1.1 protocol with a deadline on request headers and a cap on their size (slowloris).

uvicorn times out idle keep-alive connections only: a connection that sends `GET / HTTP/1.1\r\n`
and then one header byte every few seconds (or nothing) stays open for good, without any credential,
until the server runs out of sockets. Here a request's headers must be complete within
`header_timeout_s` of its first byte (of the connection, for the first request) and within
`max_header_bytes`; otherwise the connection is answered 408 or 431 and closed. One client address
(an IPv6 one: its /64) may hold at most `max_per_address` open connections (trusted proxies exempt):
past it a connection is answered 503 and closed before anything is read. Of the process's
`max_connections`, `reserved` are kept for callers presenting a reserved credential (AddressSlots).
Body reads are bounded by the request guard (api_common.guard), which knows when the app is waiting
for a body.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from starlette.datastructures import Headers
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api_common.auth import bearer

Pool = Literal["open", "probation", "reserved", "evicted"]
RawHeaders = Sequence[tuple[bytes, bytes]]
RESERVED_DETAIL = "the remaining connection slots are reserved for authenticated callers"


def _raw_answer(status: int, reason: str, detail: str) -> bytes:
    body = ('{"code": "%s", "detail": "%s"}' % (reason.lower().replace(" ", "_"), detail)).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address as an IP (an IPv4-mapped IPv6 one as its IPv4 address); None when it is not one."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_group(address: str) -> str:
    """What the per-address cap counts a client under: an IPv4 address alone, an IPv6 address by its /64.

    One IPv6 host is routinely given a whole /64 (SLAAC, privacy addresses), so counting single IPv6
    addresses would give it 2^64 shares of the cap.
    """
    ip = _ip(address)
    if ip is None:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))  # int() drops a %scope as well
    return str(ip)


class Holder(Protocol):
    """A connection that holds a slot: told when its reserved slot is taken back."""

    def evict(self) -> None:
        """Answer 503 and close (the connection has sent no complete request yet)."""


@dataclass
class _Held:
    group: str
    pool: Pool
    proven: bool = False


class AddressSlots:
    """Open connections of one process: per client address (IPv6 per /64; trusted proxies exempt) and, when
    `total` is given, in two shares of it.

    Credentials arrive with the headers, after the connection is accepted, so the reserve cannot be
    decided at accept time. The open share (total - reserved) takes any connection. Past it, a connection
    is admitted on probation into the reserved share: its first request's headers must carry a reserved
    credential (`Authorization: Bearer` with one of `credentials`), within `reserved_header_timeout_s`
    (enforced by the protocol), or it is answered 503 and closed before any body byte is read. When the
    reserved share is full, the oldest connection still on probation is evicted (503, closed) for the
    newcomer. A caller sends its headers with, or right after, the connection's opening, so a flood of
    silent connections only evicts itself; a fixed probation without eviction would let a flood keep
    every reserved slot occupied. A connection that proved itself keeps its slot until it closes.

    Requests in progress are capped the same way: past the open share only a request carrying a reserved
    credential (or on a proven connection) starts; past `total`, none. Without credentials nothing is
    reserved. At most half of `total` is reserved, so a small test limit keeps an open share.
    """

    def __init__(self, *, per_address: int, exempt: Sequence[str] = (), total: int | None = None,
                 reserved: int = 0, credentials: Sequence[str] = (), reserved_header_timeout_s: float = 2.0) -> None:
        self.per_address = per_address
        self.exempt = [ipaddress.ip_network(e, strict=False) for e in exempt]
        self.total = total
        self.reserved = min(reserved, total // 2) if total is not None and credentials else 0
        self.open_limit = None if total is None else total - self.reserved
        self.credentials = [c.encode() for c in credentials if c]
        self.reserved_header_timeout_s = reserved_header_timeout_s
        self.open: dict[str, int] = {}  # connections per address group
        self.pooled = 0  # connections in the open share
        self.reserve_held = 0  # reserved slots held by connections past probation (proven, or refused and closing)
        self.probation: OrderedDict[Holder, None] = OrderedDict()  # oldest first
        self._held: dict[Holder, _Held] = {}

    def _exempt(self, address: str) -> bool:
        ip = _ip(address)
        return ip is not None and any(ip in net for net in self.exempt)

    def take(self, holder: Holder, address: str) -> Pool | None:
        """Count a new connection: the share it was admitted to, or None (not counted) when refused."""
        group = address_group(address)
        held = self.open.get(group, 0)
        if held >= self.per_address and not self._exempt(address):
            return None
        pool: Pool = "open"
        if self.open_limit is not None and self.pooled >= self.open_limit:
            if len(self.probation) + self.reserve_held >= self.reserved:
                if not self.probation:
                    return None  # every reserved slot is held by a proven caller
                victim, _ = self.probation.popitem(last=False)
                self._held[victim].pool = "evicted"  # its per-address count goes when it closes
                victim.evict()
            self.probation[holder] = None
            pool = "probation"
        elif self.open_limit is not None:
            self.pooled += 1
        self.open[group] = held + 1
        self._held[holder] = _Held(group, pool)
        return pool

    def admit(self, holder: Holder, headers: RawHeaders, *, tasks: int) -> bool:
        """Whether a request whose headers are complete may start (else 503); `tasks`: requests in progress."""
        held = self._held.get(holder)
        if held is not None and held.pool == "probation":
            del self.probation[holder]
            held.pool, held.proven = "reserved", self._credentialed(headers)
            self.reserve_held += 1  # until the connection closes, proven or not
            if not held.proven:
                return False
        if self.total is None or self.open_limit is None or tasks < self.open_limit:
            return True
        return tasks < self.total and ((held is not None and held.proven) or self._credentialed(headers))

    def _credentialed(self, headers: RawHeaders) -> bool:
        token = bearer(Headers(raw=list(headers)))
        if not token or not self.credentials:
            return False
        # Every credential is compared, as in api_common.auth: timing tells nothing of which one matched.
        given = token.encode("utf-8", "surrogateescape")
        matches = [hmac.compare_digest(given, c) for c in self.credentials]
        return any(matches)

    def give_back(self, holder: Holder) -> None:
        """The connection closed."""
        held = self._held.pop(holder, None)
        if held is None:
            return
        count = self.open.get(held.group, 0) - 1
        if count > 0:
            self.open[held.group] = count
        else:
            self.open.pop(held.group, None)
        if held.pool == "open" and self.open_limit is not None:
            self.pooled -= 1
        elif held.pool == "probation":
            self.probation.pop(holder, None)
        elif held.pool == "reserved":
            self.reserve_held -= 1


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol plus a header deadline, a header size cap and the connection slots of AddressSlots."""

    def __init__(self, *args: Any, header_timeout_s: float = 10.0, max_header_bytes: int = 64 << 10,
                 slots: AddressSlots | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s, self.max_header_bytes = header_timeout_s, max_header_bytes
        self._deadline: asyncio.TimerHandle | None = None
        self._due: float | None = None  # loop time by which the current request's headers must be complete
        self._header_bytes: int | None = None  # bytes of the request whose headers are incomplete
        self._slots = slots
        self._holding = False  # whether this connection is counted in the slots
        self._probation = False  # admitted to the reserved share, first request's headers not yet complete
        if slots is not None and slots.total is not None:
            # The slots count connections and requests themselves: uvicorn's own check would count the silent
            # connections of the open share against a reserved caller too.
            self.limit_concurrency = None

    # One timer per connection, not one per request: arming records when the headers are due, and a timer is
    # set only when none is pending; disarming clears the due time and leaves the timer, which on firing
    # does nothing, or sets itself again for a later request's due time.
    def _arm(self, timeout_s: float | None = None) -> None:
        if self._due is not None:
            return  # this request's headers already have their due time
        self._due = self.loop.time() + (timeout_s or self.header_timeout_s)
        if self._deadline is not None and self._deadline.when() > self._due:
            self._deadline.cancel()  # set for a later time than this request's headers are due
            self._deadline = None
        if self._deadline is None:
            self._deadline = self.loop.call_at(self._due, self._headers_timed_out)

    def _disarm(self) -> None:
        self._due = None

    def _cancel_timer(self) -> None:
        self._due = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        self._cancel_timer()
        if not self.transport.is_closing():
            self.transport.write(_raw_answer(status, reason, detail))
            self.transport.close()

    def _headers_timed_out(self) -> None:
        self._deadline = None
        if self._due is None:
            return  # the headers came in time (a kept-alive connection between requests waits on uvicorn's timer)
        if self._due > self.loop.time():  # a later request's due time
            self._deadline = self.loop.call_at(self._due, self._headers_timed_out)
            return
        if self._probation:
            self._refuse(503, "Service Unavailable", RESERVED_DETAIL)
        else:
            self._refuse(408, "Request Timeout", f"request headers not complete within {self.header_timeout_s:g} s")

    def evict(self) -> None:
        """Another connection took this one's reserved slot while it had sent no complete request."""
        self._probation = False
        self._refuse(503, "Service Unavailable", RESERVED_DETAIL)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        timeout_s = None
        if self._slots is not None and self.client is not None:
            pool = self._slots.take(self, self.client[0])
            if pool is None:
                # Refused before a byte is read: the slot limit of uvicorn (max_connections) stays for others.
                self._refuse(503, "Service Unavailable", "too many connections from this address or in all")
                return
            self._holding, self._probation = True, pool == "probation"
            if self._probation:
                timeout_s = min(self.header_timeout_s, self._slots.reserved_header_timeout_s)
        self._arm(timeout_s)  # a connection that sends nothing at all is bounded too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._slots is not None and self._holding:
            self._slots.give_back(self)
            self._holding = False
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
        self._probation = False
        slots = self._slots
        if slots is None or slots.total is None or slots.admit(self, self.headers, tasks=len(self.tasks)):
            super().on_headers_complete()
            return
        # Refused: uvicorn's own 503 (Connection: close), as its limit_concurrency answers; the body is not read.
        app, self.app = self.app, service_unavailable
        try:
            super().on_headers_complete()
        finally:
            self.app = app


def deadline_protocol(*, header_timeout_s: float, max_header_bytes: int, max_per_address: int | None = None,
                      exempt: Sequence[str] = (), max_connections: int | None = None, reserved: int = 0,
                      credentials: Sequence[str] = (), reserved_header_timeout_s: float = 2.0) -> Any:
    """The `http=` option of uvicorn.Config / uvicorn.run (a partial, so it survives worker spawning; each
    worker process counts its own connections). With `max_connections`, the slots count the process's
    connections and requests in progress, `reserved` of them kept for callers presenting `credentials`."""
    slots = None if max_per_address is None else AddressSlots(
        per_address=max_per_address, exempt=exempt, total=max_connections, reserved=reserved,
        credentials=credentials, reserved_header_timeout_s=reserved_header_timeout_s)
    return functools.partial(DeadlineHttpToolsProtocol, header_timeout_s=header_timeout_s,
                             max_header_bytes=max_header_bytes, slots=slots)
