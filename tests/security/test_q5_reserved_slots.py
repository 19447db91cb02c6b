"""Q5: the per-address cap held for one address only: 8 silent connections from each of 5 loopback addresses
filled the process, and the coordinator's pre-flight got 503 (13 of 13 tries). Now PARTY_RESERVED_CONNECTIONS
of PARTY_MAX_CONNECTIONS are kept for callers whose first request carries the admin token or the coordinator
credential: a connection past the open pool waits on probation for its headers (PARTY_RESERVED_HEADER_TIMEOUT_S),
is answered 503 without a reserved credential, and is the first to go when another connection needs its slot.
IPv6 addresses are counted per /64 (IPv4-mapped ones as their IPv4 address).

Real `python -m party_api` process; the silent callers connect from 127.0.0.2..127.0.0.6, the coordinator from
127.0.0.1, a further unauthenticated caller from 127.0.0.7."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from api_common.http_protocol import AddressSlots, address_group
from cli.localfed import COORD_TOKEN, Proc, party_proc
from services.coordinator.client import PROTOCOL_HEADER
from services.protocol import PROTOCOL_VERSION

PER_ADDRESS, TOTAL, RESERVED, PROBATION_S = 8, 32, 8, 1.0
SILENT_FROM = [f"127.0.0.{k}" for k in range(2, 7)]  # 5 addresses x 8 = 40 > TOTAL


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    env = {"PARTY_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS), "PARTY_MAX_CONNECTIONS": str(TOTAL),
           "PARTY_RESERVED_CONNECTIONS": str(RESERVED), "PARTY_RESERVED_HEADER_TIMEOUT_S": str(PROBATION_S),
           "PARTY_HEADER_TIMEOUT_S": "30"}
    proc = party_proc("q5", tmp_path_factory.mktemp("q5"), extra_env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


def _connect_from(source: str, party: Proc) -> socket.socket:
    host, port = party.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))
    sock.settimeout(5)
    return sock


def _closed_with(sock: socket.socket, wait_s: float = 0.3) -> bytes | None:
    """What the server sent before closing, or None while it keeps the connection open after wait_s."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                return data
            data += part
    except TimeoutError:
        return None
    except ConnectionResetError:
        return data


def _preflight(party: Proc) -> httpx.Response:
    """GET /v1/federation/preflight the way the coordinator's pre-flight sends it (PartyClient.preflight)."""
    with httpx.Client(base_url=party.url, timeout=10) as c:
        return c.get("/v1/federation/preflight",
                     headers={"Authorization": f"Bearer {COORD_TOKEN}", PROTOCOL_HEADER: PROTOCOL_VERSION})


def test_coordinator_gets_in_past_silent_connections_from_five_addresses(party: Proc) -> None:
    silent = [_connect_from(source, party) for source in SILENT_FROM for _ in range(PER_ADDRESS)]
    try:
        time.sleep(0.3)
        for _ in range(3):  # a fresh connection each time, as the pre-flight of a new run
            answer = _preflight(party)
            assert answer.status_code == 200, (answer.status_code, answer.text)
            assert answer.json()["party_id"] == "q5"

        # An unauthenticated request on a fresh connection gets no reserved slot ...
        with httpx.Client(base_url=party.url, timeout=10) as c:
            assert c.get("/health").status_code == 503
        # ... nor does a further silent connection: answered 503 once its probation is over.
        started = time.monotonic()
        further = _connect_from("127.0.0.7", party)
        try:
            answer_bytes = _closed_with(further, wait_s=PROBATION_S + 3)
        finally:
            further.close()
        assert answer_bytes is not None and answer_bytes.startswith(b"HTTP/1.1 503"), answer_bytes
        assert time.monotonic() - started < PROBATION_S + 2

        # The silent callers keep the open pool and nothing more: the rest were answered 503 and closed.
        states = [_closed_with(s, wait_s=0.05) for s in silent]
        still_open = sum(state is None for state in states)
        assert still_open == TOTAL - RESERVED, still_open
        assert all(s.startswith(b"HTTP/1.1 503") for s in states if s is not None), states
    finally:
        for s in silent:
            s.close()
    time.sleep(0.5)
    with httpx.Client(base_url=party.url, timeout=10) as c:  # the slots came back when those closed
        assert c.get("/health").status_code == 200


class _Holder:
    """A stand-in connection for AddressSlots: records being evicted."""

    def __init__(self) -> None:
        self.evicted_count = 0

    def evict(self) -> None:
        """The slots took this connection's reserved slot back."""
        self.evicted_count += 1


def test_ipv6_addresses_count_per_64_and_ipv4_mapped_as_ipv4() -> None:
    slots = AddressSlots(per_address=2)
    same_64 = ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::abcd"]
    assert slots.take(_Holder(), same_64[0]) and slots.take(_Holder(), same_64[1])
    assert not slots.take(_Holder(), same_64[2])  # a third from the same /64: refused
    assert slots.take(_Holder(), "2001:db8:1:3::1")  # the next /64 counts alone
    assert slots.take(_Holder(), "2001:db8:1:2::1%eth0") is None  # a scoped form of the full /64
    assert address_group("2001:db8:1:2::1") == address_group("2001:db8:1:2:0:0:0:99") == "2001:db8:1:2::/64"
    assert address_group("2001:db8:1:2::1") != address_group("2001:db8:1:3::1")

    mapped = AddressSlots(per_address=1)
    assert mapped.take(_Holder(), "10.0.0.1")
    assert not mapped.take(_Holder(), "::ffff:10.0.0.1")  # the same IPv4 caller over an IPv6 socket
    assert mapped.take(_Holder(), "10.0.0.2")  # IPv4 stays per address
    assert address_group("::ffff:10.0.0.1") == "10.0.0.1"


def test_reserved_slots_go_to_credentials_and_probation_is_evicted_oldest_first() -> None:
    token = "t" * 32
    slots = AddressSlots(per_address=100, total=4, reserved=2, credentials=[token])
    pool = [_Holder() for _ in range(2)]
    assert all(slots.take(h, f"10.0.0.{k}") == "open" for k, h in enumerate(pool))
    first, second, third = _Holder(), _Holder(), _Holder()
    assert slots.take(first, "10.0.1.1") == "probation"
    assert slots.take(second, "10.0.1.2") == "probation"
    assert slots.take(third, "10.0.1.3") == "probation"  # the reserve is full: the oldest on probation goes
    assert (first.evicted_count, second.evicted_count) == (1, 0)
    slots.give_back(first)  # its connection_lost: nothing of the reserve is given back twice

    assert slots.admit(second, [(b"authorization", b"Bearer " + token.encode())], tasks=0)
    assert not slots.admit(third, [(b"authorization", b"Bearer wrong")], tasks=0)
    assert slots.take(_Holder(), "10.0.1.4") is None  # reserve held (proven, refused-and-closing): refused
    slots.give_back(third)
    assert slots.take(_Holder(), "10.0.1.5") == "probation"
    # Requests in progress: past the open share only a reserved credential; past the total, nobody.
    assert slots.admit(pool[0], [], tasks=1) and not slots.admit(pool[0], [], tasks=2)
    assert slots.admit(pool[0], [(b"authorization", b"Bearer " + token.encode())], tasks=3)
    assert not slots.admit(second, [], tasks=4)
