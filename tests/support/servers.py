"""Run real uvicorn servers in threads on 127.0.0.1:0 for API and end-to-end tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn


class LiveServer:
    """A uvicorn server on an ephemeral loopback port, running in a daemon thread.

    `options` go to uvicorn.Config (ssl_certfile, ssl_keyfile, ssl_ca_certs, ssl_cert_reqs): with a
    certificate the server speaks HTTPS on `https://localhost:PORT` and `client_verify` trusts it.
    """

    def __init__(self, app: Any, *, client_verify: Any = True, **options: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        tls = "ssl_certfile" in options
        self.url = f"https://localhost:{self.port}" if tls else f"http://127.0.0.1:{self.port}"
        self.client_verify = client_verify
        config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_keep_alive=30, **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 20.0) -> "LiveServer":
        """Start serving and wait until the lifespan has completed."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("live server failed to start")
            time.sleep(0.02)
        return self

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for this server (TLS verified with `client_verify`)."""
        return httpx.Client(timeout=60, verify=self.client_verify, **kwargs)

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


@contextmanager
def live_server(app: Any) -> Iterator[LiveServer]:
    """Context manager around LiveServer."""
    server = LiveServer(app).start()
    try:
        yield server
    finally:
        server.stop()
