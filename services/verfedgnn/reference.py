"""The same federation in one process, built exactly as the HTTP parties build it (reference for HTTP runs)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from services.crypto.secagg import SecAggParty
from services.data.features import FeatureRow
from services.data.types import Dataset, Ratings
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.features import attach_features
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.private_data import training_data
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.secure import (
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


def party_datas(parties: Mapping[str, Dataset], *, include_private: bool = False,
                features: Mapping[str, tuple[Sequence[FeatureRow], Sequence[FeatureRow]]] | None = None,
                ) -> dict[str, PartyData]:
    """PartyData per party over the common users sorted by id (what PSI + the parties' DB load produce).

    `features`: a party's (user, item) attribute rows, attached as a party with PARTY_USE_FEATURES attaches
    what it stores.

    `include_private`: each party's users outside the intersection become its private users, as a
    VerFedGNN party loads them (off: they are dropped, as the experiments that index users globally need).
    """
    loaded = {p: _all_ratings(ds) for p, ds in parties.items()}
    common = sorted(set.intersection(*[set(v[0]) for v in loaded.values()]))
    items = {p: sorted(set(v[1])) for p, v in loaded.items()}
    total = sum(len(v) for v in items.values())
    out = {}
    for p, (u, i, r, c) in loaded.items():
        ds = parties[p]
        out[p] = build_party_data(party_id=p, user_order=common, item_order=items[p], users=u, items=i, ratings=r,
                                  codes=c, total_items=total, rating_min=ds.rating_min, rating_max=ds.rating_max,
                                  include_private=include_private)
        if features and p in features:
            out[p] = attach_features(out[p], user_order=common, item_order=items[p], users=features[p][0],
                                     items=features[p][1])
    return out


@dataclass
class ReferenceFederation:
    """An in-process federation built as the HTTP parties build theirs, with the parties' trainers."""

    federation: InProcessFederation
    trainers: dict[str, PartyTrainer]
    datas: dict[str, PartyData]  # what each party trains on (after randomized response when DP is on)
    global_mean: float  # the coordinator's: the parties' summed training ratings over their count


def build_federation(datas: Mapping[str, PartyData], *, config: TrainConfig,
                     secrets: Mapping[str, bytes] | None = None, run_id: str = "reference") -> ReferenceFederation:
    """The HTTP transport's construction in one process (global mean, agreed and party-local seeds).

    `datas` are the parties' loaded data (`party_datas`); `secrets` the parties' secrets (default:
    `dev_party_secret`, what `cli.localfed` gives its parties). Each party's training data goes
    through `training_data` with its own local seed; Φ comes from the seed the parties agree on and
    item initialisation / quantization from each party's secret; rounds are masked when
    `config.secure_aggregation`, as the coordinator plays them. `run_id` only changes the masks
    (they cancel in the sums), never the trained model.
    """
    keys = {p: (secrets or {}).get(p) or dev_party_secret(p) for p in datas}
    local = {p: SecAggParty(party_id=p, secret=keys[p], run_id=run_id).derived_seed("local", config.seed)
             for p in datas}
    trained = {p: training_data(d, config=config, local_seed=local[p]) for p, d in datas.items()}  # as each party does
    sums = [d.mean_sums() for d in trained.values()]  # as each party announces (aligned users; implicit: none)
    mean = sum(s for _, s in sums) / max(1, sum(n for n, _ in sums))
    any_data = next(iter(trained.values()))
    coord = CoordinatorTrainer(config=config, n_users=any_data.n_users, global_mean=mean,
                               item_counts={p: d.n_items for p, d in trained.items()})
    fed: InProcessFederation
    if config.secure_aggregation:
        fed = secure_federation(config=config, datas=trained, coordinator=coord, secrets=keys, run_id=run_id)
    else:
        sec = {p: SecAggParty(party_id=p, secret=keys[p], run_id=run_id) for p in trained}
        seeds = agree_in_process(sec, run_seed=config.seed)
        fed = InProcessFederation(coordinator=coord, parties={p: seeded_trainer(config=config, data=d, seeds=seeds[p])
                                                              for p, d in trained.items()})
    return ReferenceFederation(fed, dict(fed.parties), trained, mean)


@dataclass
class ReferenceResult:
    """History and timing of an in-process run."""

    history: list[RoundMetrics]
    seconds: float
    federation: InProcessFederation

    @property
    def test_rmse(self) -> float:
        """Test RMSE reported in the last round."""
        return float(self.history[-1].rmse["test"])


def run_reference(*, parties: Mapping[str, Dataset], config: TrainConfig, rounds: int,
                  secrets: Mapping[str, bytes] | None = None,
                  features: Mapping[str, tuple[Sequence[FeatureRow], Sequence[FeatureRow]]] | None = None,
                  ) -> ReferenceResult:
    """Train in-process with the HTTP transport's construction (`build_federation` over `party_datas`, each
    party's non-aligned users as its private users).

    `secrets` are the parties' secrets (default: `dev_party_secret`, what `cli.localfed` gives its
    parties); masked rounds when `config.secure_aggregation`, as the coordinator plays them.
    """
    started = time.perf_counter()
    datas = party_datas(parties, include_private=True, features=features)
    fed = build_federation(datas, config=config, secrets=secrets).federation
    history = [fed.run_round(t) for t in range(rounds)]
    return ReferenceResult(history, time.perf_counter() - started, fed)
