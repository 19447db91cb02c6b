"""The same federation in one process, built exactly as the HTTP parties build it (reference for HTTP runs)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from services.data.types import Dataset, Ratings
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.crypto.secagg import SecAggParty
from services.verfedgnn.private_data import training_data
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.secure import (
    SecureInProcessFederation,
    agree_in_process,
    dev_party_secret,
    secure_federation,
    seeded_trainer,
)
from services.verfedgnn.types import SPLIT_CODES, PartyData, RoundMetrics, build_party_data


def _all_ratings(ds: Dataset) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    parts: list[tuple[Ratings, int]] = [(ds.train, SPLIT_CODES["train"]), (ds.test, SPLIT_CODES["test"])]
    if ds.valid is not None:
        parts.append((ds.valid, SPLIT_CODES["valid"]))
    users = [str(u) for r, _ in parts for u in r.user_ids.tolist()]
    items = [str(i) for r, _ in parts for i in r.item_ids.tolist()]
    ratings = np.concatenate([r.ratings for r, _ in parts]).astype(np.float32)
    codes = np.concatenate([np.full(len(r), c, dtype=np.int8) for r, c in parts])
    return users, items, ratings, codes


def party_datas(parties: Mapping[str, Dataset]) -> dict[str, PartyData]:
    """PartyData per party over the common users sorted by id (what PSI + the parties' DB load produce)."""
    loaded = {p: _all_ratings(ds) for p, ds in parties.items()}
    common = sorted(set.intersection(*[set(v[0]) for v in loaded.values()]))
    items = {p: sorted(set(v[1])) for p, v in loaded.items()}
    total = sum(len(v) for v in items.values())
    out = {}
    for p, (u, i, r, c) in loaded.items():
        ds = parties[p]
        out[p] = build_party_data(party_id=p, user_order=common, item_order=items[p], users=u, items=i, ratings=r,
                                  codes=c, total_items=total, rating_min=ds.rating_min, rating_max=ds.rating_max)
    return out


@dataclass
class ReferenceResult:
    """History and timing of an in-process run."""

    history: list[RoundMetrics]
    seconds: float
    federation: InProcessFederation | SecureInProcessFederation

    @property
    def test_rmse(self) -> float:
        """Test RMSE reported in the last round."""
        return float(self.history[-1].rmse["test"])


def run_reference(*, parties: Mapping[str, Dataset], config: TrainConfig, rounds: int,
                  secrets: Mapping[str, bytes] | None = None) -> ReferenceResult:
    """Train in-process with the HTTP transport's construction (global mean, agreed and party-local seeds, user order).

    `secrets` are the parties' secrets (default: `dev_party_secret`, what `cli.localfed` gives its
    parties); masked rounds when `config.secure_aggregation`, as the coordinator plays them.
    """
    datas = party_datas(parties)
    keys = {p: (secrets or {}).get(p) or dev_party_secret(p) for p in datas}
    local = {p: SecAggParty(party_id=p, secret=keys[p], run_id="reference").derived_seed("local", config.seed)
             for p in datas}
    datas = {p: training_data(d, config=config, local_seed=local[p]) for p, d in datas.items()}  # as each party does
    started = time.perf_counter()
    n = sum(len(d.train) for d in datas.values())
    mean = sum(float(d.train.ratings.sum()) for d in datas.values()) / max(1, n)
    any_data = next(iter(datas.values()))
    coord = CoordinatorTrainer(config=config, n_users=any_data.n_users, global_mean=mean,
                               item_counts={p: d.n_items for p, d in datas.items()})
    fed: InProcessFederation | SecureInProcessFederation
    if config.secure_aggregation:
        fed = secure_federation(config=config, datas=datas, coordinator=coord, secrets=keys, run_id="reference")
    else:
        sec = {p: SecAggParty(party_id=p, secret=keys[p], run_id="reference") for p in datas}
        seeds = agree_in_process(sec, run_seed=config.seed)
        fed = InProcessFederation(coordinator=coord, parties={p: seeded_trainer(config=config, data=d, seeds=seeds[p])
                                                              for p, d in datas.items()})
    history = [fed.run_round(t) for t in range(rounds)]
    return ReferenceResult(history, time.perf_counter() - started, fed)
