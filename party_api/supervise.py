"""Role `all` with several workers: one federation process on loopback beside the API workers.

The launcher starts `python -m party_api --role federation` on 127.0.0.1 (plain HTTP: it is reachable
from this host only and still requires the coordinator credential), waits until it answers, restarts it
if it exits (the run resumes from the snapshots in the database), and stops it when the workers stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

log = logging.getLogger("fedrec.party")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
RESTART_DELAY_S = 1.0
# Settings of the public listener the loopback federation process must not inherit.
_PUBLIC_ONLY = ("PARTY_TLS_CERT_FILE", "PARTY_TLS_KEY_FILE", "PARTY_TLS_CLIENT_CA_FILE", "PARTY_FEDERATION_URL",
                "PARTY_HOST", "PARTY_PORT")


def free_loopback_port() -> int:
    """A loopback port that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _libc() -> ctypes.CDLL | None:
    with contextlib.suppress(OSError):
        return ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
    return None


_LIBC = _libc()  # loaded before any fork: the child between fork and exec only makes one system call


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM when the launcher dies, even by SIGKILL (no orphaned federation process)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class FederationProcess:
    """The party's one federation process, supervised by the launcher of the API workers."""

    def __init__(self, *, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._popen: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._watch: threading.Thread | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in _PUBLIC_ONLY}
        env.update({"PARTY_PROCESS_ROLE": "federation", "PARTY_WORKERS": "1"})
        args = [sys.executable, "-m", "party_api", "--role", "federation", "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", "1"]
        # preexec_fn in a threaded process: safe here, it calls one preloaded C function and nothing else.
        return subprocess.Popen(args, env=env, preexec_fn=_die_with_parent)  # noqa: PLW1509

    def _wait_healthy(self, popen: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                raise RuntimeError(f"the federation process exited with {popen.returncode} while starting")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health", timeout=2, trust_env=False).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the federation process did not answer on {self.url} within {START_TIMEOUT_S:g}s")

    def start(self) -> None:
        """Start it, wait until /health answers, then watch it."""
        self._popen = self._spawn()
        try:
            self._wait_healthy(self._popen)
        except RuntimeError:
            self.stop()
            raise
        self._watch = threading.Thread(target=self._watch_loop, name="federation-process", daemon=True)
        self._watch.start()

    def _watch_loop(self) -> None:
        """Restart the process if it exits while the workers run; API workers answer 503 meanwhile."""
        while not self._stopping.wait(0.5):
            popen = self._popen
            if popen is None or popen.poll() is None:
                continue
            log.error("federation process exited with %s; restarting it", popen.returncode)
            if self._stopping.wait(RESTART_DELAY_S):
                return
            self._popen = self._spawn()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL past the deadline."""
        self._stopping.set()
        if self._watch is not None:
            self._watch.join(timeout=STOP_TIMEOUT_S)  # no restart races the stop
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(STOP_TIMEOUT_S)
