"""Top-K figures of trained models in the harness: per-party lists merged as the coordinator's fan-out merges.

Items get global columns by concatenating the parties' catalogues in party-id order (the fan-out's
order). "Training" for the candidate rule is train ∪ validation (SPEC §5: what the served model knew).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from models.scoring import serving_scores
from services.evaluation import ranking
from services.evaluation.harness import RoundCallback, RunResult, own_metrics, train_rounds
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.reference import build_federation
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.types import (
    PartyData,
    RatingTriples,
    RoundMetrics,
)

ServingArrays = Mapping[str, np.ndarray]  # PartyTrainer.serving_model()


@dataclass(frozen=True)
class RankingView:
    """A federation seen by the ranking protocol, in global item columns."""

    party_ids: list[str]
    offsets: dict[str, int]
    sizes: dict[str, int]
    seen: np.ndarray  # (N, M) bool: train ∪ valid
    relevant: dict[int, set[int]]  # user → global items rated ≥ 4 in test
    train_counts: np.ndarray  # (M,) ratings in train ∪ valid

    def columns(self, party_id: str) -> slice:
        """The party's block of global columns."""
        return slice(self.offsets[party_id], self.offsets[party_id] + self.sizes[party_id])

    def restricted(self, party_id: str) -> tuple[np.ndarray, dict[int, set[int]], np.ndarray]:
        """(seen, relevant, train counts) of the party's own catalogue, in its local columns."""
        cols, off = self.columns(party_id), self.offsets[party_id]
        rel = {u: {v - off for v in items if cols.start <= v < cols.stop} for u, items in self.relevant.items()}
        return self.seen[:, cols], {u: r for u, r in rel.items() if r}, self.train_counts[cols]


def _global(t: RatingTriples, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return t.users, t.items + offset, t.ratings


def ranking_view(parties: Mapping[str, PartyData]) -> RankingView:
    """Candidates, relevant sets and training counts of a federation (parties in id order)."""
    ids = sorted(parties)
    sizes = {p: parties[p].n_items for p in ids}
    offsets = dict(zip(ids, np.cumsum([0] + [sizes[p] for p in ids[:-1]]).tolist()))
    n_users, n_items = parties[ids[0]].n_users, sum(sizes.values())
    known = [_global(parties[p].split(s), offsets[p]) for p in ids for s in ("train", "valid")]
    seen = ranking.seen_matrix(n_users, n_items, *[(u, v) for u, v, _ in known])
    counts = np.zeros(n_items, dtype=np.int64)
    for _, v, _ in known:
        counts += np.bincount(v, minlength=n_items)
    test = [_global(parties[p].test, offsets[p]) for p in ids]
    relevant = ranking.relevant_sets(np.concatenate([t[0] for t in test]), np.concatenate([t[1] for t in test]),
                                     np.concatenate([t[2] for t in test]))
    return RankingView(ids, offsets, sizes, seen, relevant, counts)


def party_scores(model: ServingArrays) -> np.ndarray:
    """(N, M_p) ranking scores of a party's serving arrays: the formula the party's serving path uses."""
    bias = model.get("user_bias")
    n, m = model["user_repr"].shape[0], model["item_repr"].shape[0]
    return serving_scores(model["user_repr"], model["item_repr"], rank_bias=model.get("rank_bias"),
                       rating_dim=int(model.get("rating_dim", 0)),
                       global_bias=float(np.asarray(model.get("global_bias", 0.0)).reshape(-1)[0]),
                       user_bias=np.zeros(n) if bias is None else bias.reshape(n),
                       item_bias=model["item_bias"].reshape(m))


def merged_top(view: RankingView, scores: Mapping[str, np.ndarray], k: int) -> np.ndarray:
    """(N, k) global columns: each party's top-k of its unseen items, merged by score (the fan-out)."""
    parts = []
    for p in view.party_ids:
        cols, top = ranking.top_k(scores[p], view.seen[:, view.columns(p)], k)
        parts.append((np.where(cols >= 0, cols + view.offsets[p], -1), top))
    return ranking.merge_top_k(parts, k)[0]


def evaluate_federation(view: RankingView, scores: Mapping[str, np.ndarray], k: int = max(ranking.KS)
                        ) -> dict[str, float]:
    """Merged-list figures plus each party's share of the merged top-10 and of the relevant test items."""
    top = merged_top(view, scores, k)
    lists = ranking.lists_from_top(top, view.relevant)
    out = ranking.evaluate_lists(lists, view.relevant, n_items=view.seen.shape[1], train_counts=view.train_counts)
    shown = np.concatenate([np.asarray(v[:ranking.SUMMARY_K]) for v in lists.values()])
    rel = np.array([v for items in view.relevant.values() for v in items])
    for p in view.party_ids:
        c = view.columns(p)
        out[f"share_shown:{p}"] = float(np.mean((shown >= c.start) & (shown < c.stop)))
        out[f"share_relevant:{p}"] = float(np.mean((rel >= c.start) & (rel < c.stop)))
    return out


def evaluate_party(view: RankingView, party_id: str, scores: np.ndarray) -> dict[str, float]:
    """Figures of one party's (N, M_p) scores on its own catalogue (candidates and relevant items its own)."""
    seen, relevant, counts = view.restricted(party_id)
    return ranking.evaluate_scores(scores, seen=seen, relevant=relevant, train_counts=counts)


def evaluate_central(view: RankingView, scores: np.ndarray) -> dict[str, float]:
    """Figures of a centralized (N, M) score matrix over the whole federation's catalogue."""
    return ranking.evaluate_scores(scores, seen=view.seen, relevant=view.relevant, train_counts=view.train_counts)


@dataclass
class RankedRun:
    """A run and its parties' serving arrays at the round with the best validation RMSE."""

    result: RunResult
    models: dict[str, dict[str, np.ndarray]]
    federation: InProcessFederation

    def scores(self) -> dict[str, np.ndarray]:
        """Each party's (N, M_p) ranking scores."""
        return {p: party_scores(m) for p, m in self.models.items()}


def train_ranked(parties: Mapping[str, PartyData], *, config: TrainConfig, protocol: str,
                 global_mean: float | None = None, secrets: Mapping[str, bytes] | None = None,
                 on_round: RoundCallback | None = None,
                 on_model: Callable[[int, dict[str, np.ndarray]], None] | None = None,
                 valid_loss: Callable[[dict[str, np.ndarray]], float] | None = None,
                 round_ndcg: bool = False) -> RankedRun:
    """Train VerFedGNN in-process with early stopping, keeping the best round's serving arrays.

    Two or more parties are a federation, built exactly as the HTTP parties build theirs
    (`reference.build_federation`: agreed Φ seed, party-local seeds from `secrets` (default: the dev
    secrets `cli.localfed` gives its parties), masked rounds under `config.secure_aggregation`, the
    coordinator's global mean), so the served model is the harness's model. Per-party figures are
    each party's own (`own_metrics`). One party (alone, or every item centralized) trains with the
    plain construction and `global_mean` (default: its own training mean). `on_model(t, scores)`
    gets every round's per-party ranking scores (for figures over rounds). `valid_loss(scores)`, when
    given, replaces the validation RMSE that early stopping watches (lower is better): for parties
    that report no rating errors (implicit feedback), e.g. 1 − validation NDCG; it stops after
    `config.rank_patience` rounds without improvement (default `patience`). `round_ndcg`: stop on (and keep the
    best round by) the round's own pooled validation NDCG@10, the figure a coordinator run of a ranking config
    follows (services/coordinator/runner.py `watched_figure`), where the round reports one; `valid_loss` is
    then the fallback for rounds without it.
    """
    fed: InProcessFederation
    if len(parties) > 1:
        if global_mean is not None:
            raise ValueError("a federation's global mean is the coordinator's (from the parties' sums)")
        built = build_federation(parties, config=config, secrets=secrets)
        fed, trainers = built.federation, built.trainers
    else:
        (p, d), = parties.items()
        mean = float(d.train.ratings.mean()) if global_mean is None else global_mean
        coord = CoordinatorTrainer(config=config, n_users=d.n_users, item_counts={p: d.n_items}, global_mean=mean)
        trainers = {p: PartyTrainer(config=config, data=d, seed=config.seed)}
        fed = InProcessFederation(coordinator=coord, parties=trainers)
    kept: dict[str, dict[str, np.ndarray]] = {}

    def keep(t: int) -> None:
        kept.clear()
        kept.update({p: tr.serving_model() for p, tr in trainers.items()})

    def run_round(t: int) -> RoundMetrics:
        m = own_metrics(fed.run_round(t), trainers)
        if on_model is not None or valid_loss is not None:
            scores = {p: party_scores(tr.serving_model()) for p, tr in trainers.items()}
            if on_model is not None:
                on_model(t, scores)
            if valid_loss is not None:
                m = replace(m, rmse={**m.rmse, "valid": valid_loss(scores)})
        pooled = m.ndcg.get("valid", math.nan) if round_ndcg else math.nan
        if math.isfinite(pooled):
            m = replace(m, rmse={**m.rmse, "valid": 1.0 - pooled})  # lower is better, as the RMSE it stands for
        return m

    # the ranking figure has its own patience (`rank_patience`): it stalls for longer than the RMSE does
    stop = config if (valid_loss is None and not round_ndcg) or config.rank_patience is None else \
        config.model_copy(update={"patience": config.rank_patience})
    result = train_rounds(run_round, config=stop, protocol=protocol, on_round=on_round, on_best=keep)
    return RankedRun(result, dict(kept), fed)
