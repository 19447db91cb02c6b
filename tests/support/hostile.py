"""A hostile client on a raw socket: announce a huge body, send some of it, time the answer, watch the RSS."""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass
class HostileAnswer:
    """What the server answered to a body it should not read, and what it cost it."""

    status: int
    body: dict[str, object]
    seconds_to_answer: float  # from the end of the request headers to the complete answer
    bytes_sent: int  # how much of the body the server let in before closing


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (VmHWM) so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc status")


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next((int(v) for k, _, v in (h.partition(": ") for h in lines[1:]) if k.lower() == "content-length"), 0)
    while len(rest) < length:
        part = sock.recv(65536)
        if not part:
            break
        rest += part
    return status, json.loads(rest[:length] or b"{}")


def send_unread_body(url: str, path: str, *, size: int, headers: dict[str, str] | None = None,
                     method: str = "POST", timeout: float = 10.0) -> HostileAnswer:
    """Announce `size` bytes of JSON, then send the body while watching for an early answer.

    A guarded server answers right after the headers and closes; one that reads first answers only
    after the whole body (or never, within `timeout`).
    """
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n{extra}\r\n").encode()
        chunk = b"[" + b"1," * (CHUNK // 2 - 1) + b"1"
        sock.sendall(head)
        started = time.perf_counter()
        sent = 0
        answered = False
        while not answered:
            answered = bool(select.select([sock], [], [], 0 if sent < size else timeout)[0])
            if answered or sent >= size:
                break
            try:
                sock.sendall(chunk[: min(CHUNK, size - sent)])
            except OSError:  # closed by the server: its answer is waiting to be read
                break
            sent += min(CHUNK, size - sent)
        status, body = _read_answer(sock)
        seconds = time.perf_counter() - started
    return HostileAnswer(status, body, seconds, sent)
