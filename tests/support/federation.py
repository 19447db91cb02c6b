"""A federation of live party servers and a live coordinator (threads) on tiny synthetic data."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cli.localfed import (
    ADMIN,
    API_KEY,
    COORD_TOKEN,
    CoordinatorClient,
    Proc,
    coordinator_proc,
    load_party,
    start_all,
)
from coordinator_api.main import create_app as coordinator_app
from party_api.main import create_app as party_app
from services.config import CoordinatorSettings, PartySettings
from services.data.splits import vertical_split_dataset
from services.data.synthetic import generate
from services.data.types import Dataset, Ratings
from services.db.session import migrate, upgrade
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.secure import dev_party_secret
from tests.support.servers import LiveServer

# The engine's own defaults spelled out (a run's unset settings come from its preset, tuned-ranking by
# default), secure aggregation left to the coordinator's default (on), and a tiny model.
ENGINE_DEFAULTS: dict[str, Any] = TrainConfig().model_dump(exclude={"seed", "rounds", "secure_aggregation",
                                                                     "projection_seed"})
TINY_CONFIG: dict[str, Any] = {**ENGINE_DEFAULTS, "dim": 4, "layers": 2, "q_ratio": 0.3}


def _relabel(r: Ratings) -> Ratings:
    """Distinctive ids ("user-17", "item-42") so a test can search request bodies for them."""
    return Ratings(np.array([f"user-{u}" for u in r.user_ids.tolist()], dtype=object),
                   np.array([f"item-{i}" for i in r.item_ids.tolist()], dtype=object), r.ratings, r.timestamps)


def tiny_parties(n_parties: int = 3, *, seed: int = 1) -> dict[str, Dataset]:
    """A small synthetic data set split vertically over parties p0..p{n-1}."""
    ds = generate(60, 90, 1600, seed=seed)
    ds = replace(ds, train=_relabel(ds.train), test=_relabel(ds.test),
                 valid=_relabel(ds.valid) if ds.valid is not None else None)
    return {f"p{k}": part for k, part in enumerate(vertical_split_dataset(ds, n_parties, seed=seed))}


def coordinator_settings(url: str, **overrides: Any) -> CoordinatorSettings:
    """Coordinator settings with short fault timings for tests."""
    values: dict[str, Any] = {"database_url": url, "admin_token": ADMIN, "api_keys": [API_KEY],
                              "request_timeout_s": 20.0, "max_retries": 1, "retry_backoff_s": 0.05,
                              "pause_poll_s": 0.2}
    values.update(overrides)
    return CoordinatorSettings(**values)


@dataclass
class Federation:
    """Running parties and coordinator."""

    parties: dict[str, LiveServer]
    coordinator: LiveServer
    datasets: dict[str, Dataset]
    root: Path
    client: CoordinatorClient
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))

    def party_db(self, party_id: str) -> str:
        """SQLite URL of a party's database."""
        return f"sqlite:///{self.root / party_id / 'party.db'}"


@contextmanager
def federation(root: Path, *, n_parties: int = 3, wrap: Callable[[str, Any], Any] | None = None,
               party: dict[str, Any] | None = None,
               server: dict[str, Any] | Callable[[str], dict[str, Any]] | None = None,
               datasets: dict[str, Dataset] | None = None, **coord: Any) -> Iterator[Federation]:
    """Start parties (optionally wrapping each ASGI app) and a coordinator; load data; register parties.

    `party` overrides every party's settings, `server` passes uvicorn options (TLS) to the party servers
    (the same to each, or per party id when it is a function).
    """
    datasets = datasets if datasets is not None else tiny_parties(n_parties)
    with ExitStack() as stack:
        servers = {}
        http = stack.enter_context(httpx.Client(timeout=60))
        for pid, ds in datasets.items():
            (root / pid).mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{root / pid / 'party.db'}"
            migrate(url)
            settings = PartySettings(party_id=pid, database_url=url, data_dir=root / pid, admin_token=ADMIN,
                                     coordinator_token=COORD_TOKEN, api_keys=[API_KEY],
                                     secret=dev_party_secret(pid).hex(),  # the in-process reference's secrets
                                     dev_mode=True,  # which are public: accepted in dev mode only
                                     **(party or {}))
            app = party_app(settings)
            options = server(pid) if callable(server) else (server or {})
            live = LiveServer(wrap(pid, app) if wrap else app, **options).start()
            stack.callback(live.stop)
            servers[pid] = live
            with live.client() as loader:
                load_party(loader, live.url, ds)
        curl = f"sqlite:///{root / 'coordinator.db'}"
        upgrade(curl, environment="coordinator")
        coordinator = LiveServer(coordinator_app(coordinator_settings(curl, **coord))).start()
        stack.callback(coordinator.stop)
        client = CoordinatorClient(coordinator.url)
        for pid, live in servers.items():
            client.register(pid, live.url, tls_name=pid if "party_ca_file" in coord else None)
        yield Federation(servers, coordinator, datasets, root, client, http)


@dataclass
class ProcessFederation:
    """Live party and coordinator processes with data loaded and parties registered."""

    parties: dict[str, Proc]
    coordinator: Proc
    client: CoordinatorClient


@contextmanager
def process_federation(root: Path, datasets: dict[str, Dataset], *, party: Callable[[str, Path], Proc],
                       coordinator_env: dict[str, str]) -> Iterator[ProcessFederation]:
    """Start `party(pid, root)` for each data set and a coordinator process, load the data, register the parties;
    every process is stopped on exit."""
    parties = {pid: party(pid, root) for pid in datasets}
    coordinator = coordinator_proc(root, extra_env=coordinator_env)
    procs = [*parties.values(), coordinator]
    try:
        start_all(procs, timeout=180)
        with httpx.Client(timeout=120) as http:
            for pid, proc in parties.items():
                load_party(http, proc.url, datasets[pid])
        client = CoordinatorClient(coordinator.url, http=httpx.Client(timeout=60))
        for pid, proc in parties.items():
            client.register(pid, proc.url)
        yield ProcessFederation(parties, coordinator, client)
    finally:
        for proc in procs:
            proc.stop()
