"""Experiment harness: index a data set, split items over parties, train with early stopping.

Protocols share one engine: federated (all parties, privacy as configured), centralized (one
party holding every item, privacy off) and local-only (each party alone, privacy off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from services.data.features import FeatureRow
from services.data.splits import vertical_split, with_validation
from services.data.types import Dataset, Ratings
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.features import feature_edges
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.types import (
    SPLITS,
    FeatureEdges,
    MetricSums,
    PartyData,
    RatingTriples,
    RoundMetrics,
    rmse_mae,
)

PROTOCOLS = ("centralized", "federated", "local")
RoundCallback = Callable[[str, RoundMetrics], None]


@dataclass(frozen=True)
class Federation:
    """A data set indexed for training: per-party data plus the shared training mean."""

    parties: list[PartyData]
    n_users: int
    global_mean: float
    user_ids: list[str] = field(default_factory=list)  # row k: user_ids[k]
    item_ids: list[list[str]] = field(default_factory=list)  # party p's local item j: item_ids[p][j]


@dataclass
class RunResult:
    """Outcome of one protocol run (test figures at the round with the best validation RMSE)."""

    protocol: str
    rmse: float
    mae: float
    best_round: int
    rounds_run: int
    per_party: dict[str, dict[str, float]] = field(default_factory=dict)
    valid_history: list[float] = field(default_factory=list)


def ensure_validation(dataset: Dataset, *, fraction: float, seed: int) -> Dataset:
    """Carve a seeded validation split from train when the data set has none."""
    if dataset.valid is not None and len(dataset.valid) > 0:
        return dataset
    return with_validation(dataset, fraction, seed=seed)


def _triples(r: Ratings | None, user_index: dict[str, int], item_index: dict[str, int], owner: dict[str, int],
             party: int) -> RatingTriples:
    if r is None or len(r) == 0:
        return RatingTriples.empty()
    items = r.item_ids.astype(str)
    mask = np.fromiter((owner[i] == party for i in items), dtype=bool, count=len(items))
    users = np.fromiter((user_index[u] for u in r.user_ids[mask].astype(str)), dtype=np.int64)
    local = np.fromiter((item_index[i] for i in items[mask]), dtype=np.int64)
    return RatingTriples(users, local, r.ratings[mask].astype(np.float32))


def build_federation(dataset: Dataset, *, n_parties: int, seed: int) -> Federation:
    """Index users, assign items to parties at random (seeded) and cut every split by party."""
    splits = [s for s in (dataset.train, dataset.valid, dataset.test) if s is not None]
    users = np.unique(np.concatenate([s.user_ids.astype(str) for s in splits]))
    items = np.unique(np.concatenate([s.item_ids.astype(str) for s in splits]))
    user_index = {u: i for i, u in enumerate(users)}
    groups = vertical_split(items, n_parties, np.random.default_rng([seed, 31]))
    owner = {i: p for p, grp in enumerate(groups) for i in grp}
    item_index = {i: j for grp in groups for j, i in enumerate(grp)}
    parties = []
    for p, grp in enumerate(groups):
        def cut(r: Ratings | None, p: int = p) -> RatingTriples:
            return _triples(r, user_index, item_index, owner, p)
        parties.append(PartyData(party_id=f"party{p}", n_users=len(users), n_items=len(grp), total_items=len(items),
                                 train=cut(dataset.train), valid=cut(dataset.valid), test=cut(dataset.test),
                                 rating_min=dataset.rating_min, rating_max=dataset.rating_max))
    return Federation(parties, len(users), float(dataset.train.ratings.mean()), [str(u) for u in users],
                      [[str(i) for i in grp] for grp in groups])


def with_features(fed: Federation, *, users: Sequence[FeatureRow], items: Sequence[FeatureRow],
                  user_party: int = 0) -> Federation:
    """`fed` with side information: user features at party `user_party`, item features at their item's party."""
    uidx = {u: k for k, u in enumerate(fed.user_ids)}
    parties = []
    for p, data in enumerate(fed.parties):
        iidx = {v: k for k, v in enumerate(fed.item_ids[p])}
        parties.append(replace(data, user_features=feature_edges(users, uidx) if p == user_party else None,
                               item_features=feature_edges(items, iidx)))
    return replace(fed, parties=parties)


def _merge_edges(parts: Sequence[tuple[FeatureEdges | None, int]]) -> FeatureEdges | None:
    """One party's links from several (links, entity offset): each part's tokens kept apart."""
    ents, toks, n = [], [], 0
    for edges, offset in parts:
        if edges is not None:
            ents.append(edges.entities + offset)
            toks.append(edges.tokens + n)
            n += edges.n_tokens
    return FeatureEdges(np.concatenate(ents), np.concatenate(toks), n) if n else None


def merge_parties(fed: Federation) -> PartyData:
    """One party holding every item (the centralized reference); item indices are re-based."""
    offsets = np.cumsum([0] + [p.n_items for p in fed.parties])

    def cat(name: str) -> RatingTriples:
        parts = [p.split(name) for p in fed.parties]
        return RatingTriples(np.concatenate([t.users for t in parts]),
                             np.concatenate([t.items + offsets[k] for k, t in enumerate(parts)]),
                             np.concatenate([t.ratings for t in parts]))
    first = fed.parties[0]
    if len({p.feedback for p in fed.parties}) > 1:
        raise ValueError("explicit and implicit parties cannot be merged into one party")
    users = _merge_edges([(p.user_features, 0) for p in fed.parties])
    items = _merge_edges([(p.item_features, int(offsets[k])) for k, p in enumerate(fed.parties)])
    return PartyData("central", fed.n_users, int(offsets[-1]), int(offsets[-1]), cat("train"), cat("valid"),
                     cat("test"), first.rating_min, first.rating_max, feedback=first.feedback,
                     user_features=users, item_features=items)


def alone(data: PartyData) -> PartyData:
    """The party as if it were the whole federation (local-only training): its private users become
    ordinary users (same indices), every one of them trained by the one model; its feedback kind is kept."""
    return replace(data, n_users=data.n_users + data.n_private, total_items=data.n_items, private_user_ids=[])


def train_rounds(run_round: Callable[[int], RoundMetrics], *, config: TrainConfig, protocol: str,
                 on_round: RoundCallback | None = None, on_best: Callable[[int], None] | None = None) -> RunResult:
    """Call `run_round` until `config.rounds` or `config.patience` rounds without a better validation RMSE.

    `on_best(t)` runs after each round t that improves the validation RMSE (to keep that round's model).
    """
    best = RunResult(protocol, float("nan"), float("nan"), -1, 0)
    best_valid = float("inf")
    for t in range(config.rounds):
        m = run_round(t)
        best.valid_history.append(m.rmse["valid"])
        best.rounds_run = t + 1
        if on_round is not None:
            on_round(protocol, m)
        if m.rmse["valid"] < best_valid:
            best_valid = m.rmse["valid"]
            best.rmse, best.mae, best.best_round = m.rmse["test"], m.mae["test"], t
            best.per_party = {k: {"rmse": v["test_rmse"], "mae": v["test_mae"], "valid_rmse": v["valid_rmse"]}
                              for k, v in m.per_party.items()}
            if on_best is not None:
                on_best(t)
        elif t - best.best_round >= config.patience:
            break
    return best


def own_metrics(m: RoundMetrics, trainers: Mapping[str, PartyTrainer]) -> RoundMetrics:
    """`m` with per-party figures each party computes on its own ratings (a masked round sends only sums)."""
    if m.per_party:
        return m
    rows = {}
    for p in m.participants:
        sums = trainers[p].last_metrics
        row = {}
        for split in SPLITS:
            row[f"{split}_rmse"], row[f"{split}_mae"] = rmse_mae([sums.get(split, MetricSums())])
        rows[p] = row
    return replace(m, per_party=rows)


def train_federation(parties: Sequence[PartyData], *, config: TrainConfig, global_mean: float, protocol: str,
                     on_round: RoundCallback | None = None) -> RunResult:
    """Train VerFedGNN in-process with early stopping on the validation RMSE (`train_rounds`)."""
    coord = CoordinatorTrainer(config=config, n_users=parties[0].n_users,
                               item_counts={p.party_id: p.n_items for p in parties}, global_mean=global_mean)
    trainers = {p.party_id: PartyTrainer(config=config, data=p, seed=config.seed) for p in parties}
    fed = InProcessFederation(coordinator=coord, parties=trainers)
    # the round aggregates sums only: each party's figures come from its own sums (an experiment's view)
    return train_rounds(lambda t: own_metrics(fed.run_round(t), trainers), config=config, protocol=protocol,
                        on_round=on_round)


def run_protocol(fed: Federation, *, protocol: str, config: TrainConfig,
                 on_round: RoundCallback | None = None) -> RunResult:
    """Run one protocol on an indexed federation."""
    private_off = config.model_copy(update={"use_projection": False, "use_quantization": False})
    if protocol == "federated":
        return train_federation(fed.parties, config=config, global_mean=fed.global_mean, protocol=protocol,
                                on_round=on_round)
    if protocol == "centralized":
        return train_federation([merge_parties(fed)], config=private_off, global_mean=fed.global_mean,
                                protocol=protocol, on_round=on_round)
    if protocol == "local":
        runs = [train_federation([alone(p)], config=private_off, global_mean=fed.global_mean,
                                 protocol=f"local:{p.party_id}", on_round=on_round) for p in fed.parties]
        per_party = {p.party_id: r.per_party[p.party_id] for p, r in zip(fed.parties, runs)}
        # each party's test figures back to error sums, pooled over all test ratings
        rmse, mae = rmse_mae([MetricSums(r.rmse ** 2 * len(p.test), r.mae * len(p.test), len(p.test))
                              for p, r in zip(fed.parties, runs)])
        return RunResult("local", rmse, mae, max(r.best_round for r in runs), sum(r.rounds_run for r in runs),
                         per_party, runs[0].valid_history)
    raise ValueError(f"unknown protocol {protocol!r}")
