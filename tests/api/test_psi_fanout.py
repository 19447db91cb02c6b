"""The coordinator's PSI over three live parties: the steps go to every party at once, the result is the same."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from party_api.main import create_app
from services.coordinator.client import PartyClient, TrafficCounter
from services.coordinator.psi import align_users
from services.coordinator.registry import PartyEndpoint
from services.db.session import make_engine, migrate
from services.party import fed_store
from services.protocol.federation import unpack_tree
from tests.support.party import ADMIN, COORDINATOR, csv_body, party_settings
from tests.support.servers import live_server

USERS = 1_500  # enough ids that one blinding takes a good part of a second, so the calls overlap when parallel


class TimedClient(PartyClient):
    """A real PartyClient that notes when each of its PSI start calls began and ended."""

    spans: list[tuple[float, float]]

    def psi_start(self, *, run_id: str) -> bytes:
        began = time.monotonic()
        try:
            return super().psi_start(run_id=run_id)
        finally:
            self.spans.append((began, time.monotonic()))


@pytest.fixture
def parties(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Three live parties; party k holds users k·500 .. k·500 + USERS - 1 (users 1000..1499 at all three)."""
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        for k in range(3):
            db = f"sqlite:///{tmp_path / f'p{k}.db'}"
            migrate(db)
            server = stack.enter_context(live_server(create_app(party_settings(db, party_id=f"p{k}"))))
            rows: list[tuple[object, ...]] = [(f"u{k * 500 + j}", f"i{j % 50}", 1 + j % 5, 0) for j in range(USERS)]
            httpx.post(f"{server.url}/v1/interactions/bulk", content=csv_body(rows), timeout=60,
                       headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "text/csv"}).raise_for_status()
            urls[f"p{k}"] = server.url
        yield urls


def _align(urls: dict[str, str], run_id: str, pool: ThreadPoolExecutor | None) -> tuple[int, list[tuple[float, float]]]:
    spans: list[tuple[float, float]] = []
    clients = {}
    for pid, url in urls.items():
        client = TimedClient(PartyEndpoint(pid, url, COORDINATOR, "ratings", True), http=httpx.Client(),
                             counter=TrafficCounter(), max_retries=0)
        client.spans = spans
        clients[pid] = client
    return align_users(clients=clients, run_id=run_id, pool=pool), spans


def _aligned(tmp_path: Path, pid: str, run_id: str) -> list[str]:
    engine = make_engine(f"sqlite:///{tmp_path / f'{pid}.db'}")
    with Session(engine) as session:
        found = fed_store.get_artifact(session=session, name=f"alignment:{run_id}")
    engine.dispose()
    assert found is not None
    return [str(u) for u in unpack_tree(found[1])["user_ids"].tolist()]


def test_psi_asks_every_party_at_once_and_aligns_as_one_after_another(parties: dict[str, str], tmp_path: Path) -> None:
    n_seq, seq = _align(parties, "r-seq", None)
    with ThreadPoolExecutor(4) as pool:
        n_par, par = _align(parties, "r-par", pool)
    assert n_seq == n_par == 500
    expected = sorted(f"u{j}" for j in range(1000, 1500))
    for pid in parties:
        assert _aligned(tmp_path, pid, "r-seq") == _aligned(tmp_path, pid, "r-par") == expected
    seq.sort()
    assert all(seq[k][0] >= seq[k - 1][1] for k in range(1, 3))  # one after another: each began after the last ended
    assert max(b for b, _ in par) < min(e for _, e in par)  # at once: every call began before the first one ended


def test_a_failing_party_fails_the_parallel_psi(parties: dict[str, str]) -> None:
    urls = {**parties, "p3": "http://127.0.0.1:9"}  # nothing listens there
    with ThreadPoolExecutor(4) as pool, pytest.raises(Exception) as caught:
        _align(urls, "r-bad", pool)
    assert "p3" in str(caught.value)
