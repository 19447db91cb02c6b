"""A local federation on loopback: party/coordinator processes, data loading over HTTP, run control."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cli.certs import COORDINATOR_CLIENT, OPERATOR, federation_certs
from cli.http import checked
from services.data.types import Dataset, Ratings
from services.db.session import owner_only_dir, owner_only_file
from services.errors import Conflict
from services.verfedgnn.secure import dev_party_secret

# Fresh secrets per process: the services refuse short or public tokens outside dev mode, and the
# processes of a local federation get them through their environment.
ADMIN = secrets.token_urlsafe(32)
COORD_TOKEN = secrets.token_urlsafe(32)
API_KEY = secrets.token_urlsafe(32)
INGEST_CHUNK = 50_000
# One torch thread per service process: the parties already run in parallel, and on a small machine
# oversubscribed OpenMP threads make sparse graph ops several times slower (see benchmarks/federation.py).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def free_port() -> int:
    """An ephemeral loopback port that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """A service running as a separate process."""

    name: str
    url: str
    env: dict[str, str]
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    verify: ssl.SSLContext | bool = True  # what a client checks the server with (and presents, under mTLS)

    def spawn(self) -> Proc:
        """Start the process without waiting."""
        owner_only_file(self.log)  # logs name routes and errors: owner-only, like the databases
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(self.args, env={**os.environ, **self.env}, stdout=log, stderr=log,
                                          start_new_session=True)
        return self

    def wait_ready(self, *, timeout: float = 60.0) -> Proc:
        """Wait until /health answers."""
        wait_healthy(self.url, timeout=timeout, proc=self.popen, log=self.log, verify=self.verify)
        return self

    def start(self, *, timeout: float = 60.0) -> Proc:
        """Spawn and wait until /health answers."""
        return self.spawn().wait_ready(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL (a crash, no cleanup)."""
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait (clean shutdown); SIGKILL if it hangs."""
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def start_all(procs: list[Proc], *, timeout: float = 90.0) -> None:
    """Spawn several processes at once, then wait for each (start-up overlaps)."""
    for proc in procs:
        proc.spawn()
    for proc in procs:
        proc.wait_ready(timeout=timeout)


def wait_healthy(url: str, *, timeout: float, proc: subprocess.Popen[bytes] | None = None,
                 log: Path | None = None, path: str = "/health", verify: ssl.SSLContext | bool = True) -> None:
    """Poll GET `path` (/health, or /ready for a migrated database) until it answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-2000:] if log else ""
            raise RuntimeError(f"{url} exited with {proc.returncode}:\n{tail}")
        try:
            if httpx.get(f"{url}{path}", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}{path} did not answer 200 in {timeout}s")


@dataclass(frozen=True)
class LocalTLS:
    """A development CA and certificates for a local federation (`fedrec certs`), and who uses which.

    Parties serve HTTPS with server certificates named after them and require a client certificate
    from the CA (mutual TLS); the coordinator serves HTTPS with its server certificate, verifies each
    party against the CA and the party's own name (`tls_name`, pinned at registration) and presents
    its client certificate (`coordinator-client`); the operator's clients (data loading, run
    control, apps) trust the CA and present the `operator` client certificate.
    """

    files: dict[str, tuple[Path, Path]]

    @classmethod
    def create(cls, out: Path, parties: list[str]) -> LocalTLS:
        """Write ca.crt, a server certificate per service and the client certificates under `out` (loopback SANs)."""
        owner_only_dir(out)
        return cls(federation_certs(out, parties=parties, hosts=["localhost", "127.0.0.1"]))

    @property
    def ca(self) -> Path:
        """The CA bundle every side verifies the others against."""
        return self.files["ca"][0]

    def party_env(self, party_id: str) -> dict[str, str]:
        """PARTY_* settings: serve HTTPS with the party's certificate, require client certificates."""
        cert, key = self.files[party_id]
        return {"PARTY_TLS_CERT_FILE": str(cert), "PARTY_TLS_KEY_FILE": str(key),
                "PARTY_TLS_CLIENT_CA_FILE": str(self.ca)}

    def coordinator_env(self) -> dict[str, str]:
        """COORD_* settings: serve HTTPS, verify parties against the CA, present the client certificate."""
        cert, key = self.files["coordinator"]
        client_cert, client_key = self.files[COORDINATOR_CLIENT]
        return {"COORD_TLS_CERT_FILE": str(cert), "COORD_TLS_KEY_FILE": str(key), "COORD_PARTY_CA_FILE": str(self.ca),
                "COORD_CLIENT_CERT_FILE": str(client_cert), "COORD_CLIENT_KEY_FILE": str(client_key)}

    def client_context(self) -> ssl.SSLContext:
        """For httpx clients of the operator: trust the CA, present the operator certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        cert, key = self.files[OPERATOR]
        context.load_cert_chain(str(cert), str(key))
        return context


def party_proc(party_id: str, root: Path, *, port: int | None = None,
               extra_env: Mapping[str, str] | None = None, tls: LocalTLS | None = None, workers: int = 1) -> Proc:
    """A party service process with its own SQLite database under root/party_id (HTTPS + mTLS with `tls`).

    With `workers` > 1 it serves with that many API workers beside one federation process (role all).
    """
    port = port or free_port()
    home = root / party_id
    owner_only_dir(home)
    env = {"PARTY_PARTY_ID": party_id, "PARTY_DATABASE_URL": f"sqlite:///{home / 'party.db'}",
           "PARTY_DATA_DIR": str(home), "PARTY_ADMIN_TOKEN": ADMIN, "PARTY_COORDINATOR_TOKEN": COORD_TOKEN,
           "PARTY_API_KEYS": f'["{API_KEY}"]', "PARTY_SECRET": dev_party_secret(party_id).hex(), **ONE_THREAD,
           # The demo's secret is public (the in-process reference reproduces it): a service accepts it
           # in dev mode only, which also keeps the party on loopback.
           "PARTY_DEV_MODE": "1",
           "PARTY_WORKERS": str(workers), **(tls.party_env(party_id) if tls else {}), **(extra_env or {})}
    return Proc(party_id, f"{'https' if tls else 'http'}://127.0.0.1:{port}", env,
                [sys.executable, "-m", "party_api", "--host", "127.0.0.1", "--port", str(port)], home / "log.txt",
                verify=tls.client_context() if tls else True)


def coordinator_proc(root: Path, *, port: int | None = None, extra_env: Mapping[str, str] | None = None,
                     tls: LocalTLS | None = None) -> Proc:
    """The coordinator process with its own SQLite database under root/coordinator (HTTPS with `tls`)."""
    port = port or free_port()
    home = root / "coordinator"
    owner_only_dir(home)
    env = {"COORD_DATABASE_URL": f"sqlite:///{home / 'coordinator.db'}", "COORD_DATA_DIR": str(home),
           "COORD_ADMIN_TOKEN": ADMIN, "COORD_API_KEYS": f'["{API_KEY}"]', **ONE_THREAD,
           **(tls.coordinator_env() if tls else {}), **(extra_env or {})}
    return Proc("coordinator", f"{'https' if tls else 'http'}://127.0.0.1:{port}", env,
                [sys.executable, "-m", "coordinator_api", "--host", "127.0.0.1", "--port", str(port)],
                home / "log.txt", verify=tls.client_context() if tls else True)


def _rows(r: Ratings) -> list[dict[str, Any]]:
    return [{"user_id": str(u), "item_id": str(i), "rating": float(x)}
            for u, i, x in zip(r.user_ids.tolist(), r.item_ids.tolist(), r.ratings.tolist())]


def load_party(http: httpx.Client, url: str, ds: Dataset, *, admin: str = ADMIN) -> int:
    """Ingest a party's ratings (all splits) through its API, then label the held-out ones."""
    headers = {"Authorization": f"Bearer {admin}"}
    held = [(ds.test, "test")] + ([(ds.valid, "valid")] if ds.valid is not None else [])
    rows = _rows(ds.train) + [row for r, _ in held for row in _rows(r)]
    for start in range(0, len(rows), INGEST_CHUNK):
        checked(http.post(f"{url}/v1/interactions", json={"rows": rows[start:start + INGEST_CHUNK]},
                          headers=headers, timeout=300))
    labels = [{"user_id": str(u), "item_id": str(i), "split": name}
              for r, name in held for u, i in zip(r.user_ids.tolist(), r.item_ids.tolist())]
    checked(http.put(f"{url}/v1/evaluation-split", json={"rows": labels}, headers=headers, timeout=300))
    return len(rows)


@dataclass
class CoordinatorClient:
    """Admin calls to the coordinator."""

    url: str
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))
    admin: str = ADMIN

    def _h(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin}"}

    def register(self, party_id: str, url: str, token: str = COORD_TOKEN, *, tls_name: str | None = None) -> None:
        """Register (or re-point) a party; `tls_name` pins the name its TLS certificate must carry."""
        body = {"url": url, "token": token, **({"tls_name": tls_name} if tls_name else {})}
        try:
            checked(self.http.post(f"{self.url}/v1/parties", headers=self._h(), json={"party_id": party_id, **body}))
        except Conflict:
            checked(self.http.patch(f"{self.url}/v1/parties/{party_id}", headers=self._h(), json=body))

    def create_run(self, **body: Any) -> dict[str, Any]:
        """POST /v1/runs (202)."""
        return dict(checked(self.http.post(f"{self.url}/v1/runs", headers=self._h(), json=body)))

    def run(self, run_id: str) -> dict[str, Any]:
        """GET /v1/runs/{id}."""
        return dict(checked(self.http.get(f"{self.url}/v1/runs/{run_id}", headers=self._h())))

    def wait(self, run_id: str, *, until: tuple[str, ...] = ("completed", "failed", "cancelled"),
             timeout: float = 600, rounds_done: int | None = None, on_poll: Any = None,
             poll_s: float = 0.1) -> dict[str, Any]:
        """Poll until the run reaches a state (or a number of completed rounds), every `poll_s` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.run(run_id)
            except httpx.TransportError:
                status = None
            if status is not None:
                if on_poll:
                    on_poll(status)
                if status["state"] in until or (rounds_done is not None and status["rounds_done"] >= rounds_done):
                    return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {status and status['state']} after {timeout}s")
            time.sleep(poll_s)
