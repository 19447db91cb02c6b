"""Partial user overlap, cross-domain cold start and implicit feedback (issue 25): one configuration's figures.

A configuration splits a data set over parties as `fedrec data split` does (`assign_parties`: items
at random or by genre, then users with an `overlap` share at every party; `implicit_feedback` for
implicit parties), then makes a seeded share of the aligned users cold at each party: that party keeps
at most `cold_keep` of their training (train ∪ validation) interactions, their test rows stay, and
their history at the other parties is untouched. Each party's test users fall in three slices:
aligned and warm here, aligned but cold here, not aligned (held by this party alone). Every slice is
scored (NDCG@10, recall@10; SPEC §5's protocol on the party's own catalogue) for the party's
local-only model (trained alone on all its users), for the federation, and for the same model trained on
every party's rows in one place with privacy off (`central`: the ceiling a federation could reach).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any, Literal

import numpy as np

from services.data.parsing import concat_ratings
from services.data.splits import assign_parties, implicit_feedback, keep_users, split_by_party
from services.data.types import Dataset, Ratings
from services.evaluation import ranking, topk
from services.evaluation.harness import RoundCallback, alone
from services.evaluation.served import served_scores
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.reference import party_datas
from services.verfedgnn.types import PartyData

SLICES = ("aligned-warm", "aligned-cold", "not-aligned")
K = 10


@dataclass(frozen=True)
class PartyShare:
    """One party's data in external ids: its items' rows of its users (cold users cut) and who is who here."""

    party_id: str
    dataset: Dataset
    items: np.ndarray  # sorted ids of the party's items with a row here (its catalogue, as its data loads it)
    aligned: np.ndarray  # sorted ids of the users every party holds
    private: np.ndarray  # sorted ids of the party's users no other party holds
    cold: np.ndarray  # sorted ids of the aligned users cold at this party
    feedback: Literal["explicit", "implicit"]


def _splits(ds: Dataset) -> list[Ratings]:
    return [r for r in (ds.train, ds.valid, ds.test) if r is not None]


def _users(ds: Dataset) -> np.ndarray:
    return np.unique(np.concatenate([r.user_ids.astype(str) for r in _splits(ds)]))


def _items(ds: Dataset) -> np.ndarray:
    return np.unique(np.concatenate([r.item_ids.astype(str) for r in _splits(ds)]))


def cut_cold(ds: Dataset, cold: np.ndarray, *, keep: int, rng: np.random.Generator) -> Dataset:
    """`ds` where each `cold` user keeps at most `keep` of their train ∪ validation rows (drawn from `rng`).

    The kept rows stay in their split; the others are dropped (the party never saw them). Test rows stay.
    """
    valid = ds.valid if ds.valid is not None else ds.train.subset(np.zeros(0, dtype=np.int64))
    users = np.concatenate([ds.train.user_ids.astype(str), valid.user_ids.astype(str)])
    drop = np.zeros(users.size, dtype=bool)
    is_cold = np.isin(users, cold)
    for u in np.unique(users[is_cold]):  # sorted: the draws do not depend on row order
        rows = np.flatnonzero(users == u)
        drop[rows] = True
        drop[rng.choice(rows, size=min(keep, rows.size), replace=False)] = False
    n = len(ds.train)
    return replace(ds, train=ds.train.subset(~drop[:n]),
                   valid=valid.subset(~drop[n:]) if ds.valid is not None else None)


def overlap_parties(ds: Dataset, *, n_parties: int, seed: int, overlap: float, genres: dict[str, str] | None = None,
                    implicit: float | None = None, cold_share: float = 0.2, cold_keep: int = 2
                    ) -> dict[str, PartyShare]:
    """Split `ds` (with a validation split) over parties as `fedrec data split` does, then cut the cold users.

    `cold_share` of the aligned users (seeded, disjoint) are cold at each party; `implicit`: ratings
    at or above it become interactions (1.0), the rest are dropped, in every split.
    """
    if not 0.0 <= cold_share * n_parties <= 1.0:
        raise ValueError(f"cold_share × parties must be in [0, 1], got {cold_share} × {n_parties}")
    if implicit is not None:
        ds = replace(ds, train=implicit_feedback(ds.train, implicit), test=implicit_feedback(ds.test, implicit),
                     valid=implicit_feedback(ds.valid, implicit) if ds.valid is not None else None,
                     rating_min=1.0, rating_max=1.0)
    whole = concat_ratings(_splits(ds))
    items, users = np.unique(whole.item_ids.astype(str)), np.unique(whole.user_ids.astype(str))
    item_parts, user_parts, _ = assign_parties(items, users, n_parties, seed=seed, overlap=overlap, genres=genres)
    parts = [replace(p, train=keep_users(p.train, user_parts[k]), test=keep_users(p.test, user_parts[k]),
                     valid=keep_users(p.valid, user_parts[k]) if p.valid is not None else None)
             for k, p in enumerate(split_by_party(ds, item_parts))]
    present = [_users(p) for p in parts]
    # aligned: users with rows at every party (what PSI over the parties' registered users finds)
    aligned = reduce(np.intersect1d, present)
    order = np.random.default_rng([seed, 25]).permutation(aligned.size)
    n_cold = round(cold_share * aligned.size)
    out = {}
    for k, p in enumerate(parts):
        cold = np.sort(aligned[order[k * n_cold:(k + 1) * n_cold]])
        cut = cut_cold(p, cold, keep=cold_keep, rng=np.random.default_rng([seed, 25, k]))
        out[f"party{k}"] = PartyShare(f"party{k}", cut, _items(cut), aligned,
                                      np.setdiff1d(present[k], aligned), cold,
                                      "explicit" if implicit is None else "implicit")
    return out


def local_data(share: PartyShare) -> PartyData:
    """The party alone: all its users (sorted), its items."""
    data = party_datas({share.party_id: share.dataset})[share.party_id]
    return alone(replace(data, feedback=share.feedback))


def central_share(shares: Mapping[str, PartyShare]) -> PartyShare:
    """Every party's rows in one place (no federation, no privacy): the ceiling the same model reaches with all data.

    Items are the parties' catalogues side by side; a user is one row however many parties hold them.
    """
    first = next(iter(shares.values()))
    union = replace(first.dataset, train=concat_ratings([s.dataset.train for s in shares.values()]),
                    test=concat_ratings([s.dataset.test for s in shares.values()]),
                    valid=concat_ratings([s.dataset.valid for s in shares.values() if s.dataset.valid is not None])
                    if first.dataset.valid is not None else None)
    none = np.zeros(0, dtype=str)
    return PartyShare("central", union, _items(union), first.aligned, none, none, first.feedback)


def central_block(scores: np.ndarray, central: PartyShare, share: PartyShare, ev: PartyEval) -> np.ndarray:
    """The central model's (U, M) scores for one party's users (its order) on that party's catalogue."""
    rows = np.searchsorted(_users(central.dataset), ev.users)
    cols = np.searchsorted(central.items, share.items)
    return scores[np.ix_(rows, cols)]


def federated_data(shares: Mapping[str, PartyShare], *, private: bool = True) -> dict[str, PartyData]:
    """What each party trains in the federation: the aligned users (sorted), then (`private`) its other users (sorted)."""
    datas = party_datas({p: s.dataset for p, s in shares.items()}, include_private=private)
    return {p: replace(d, feedback=shares[p].feedback) for p, d in datas.items()}


@dataclass(frozen=True)
class PartyEval:
    """One party's ranking protocol: its users (sorted), candidates, relevant test items and slices."""

    users: np.ndarray  # sorted ids of every user the party holds
    seen: np.ndarray  # (U, M) bool: train ∪ valid
    relevant: dict[int, set[int]]  # user row → relevant test items (own catalogue)
    counts: np.ndarray  # (M,) train ∪ valid rows per item (the popularity fallback's order)
    slices: dict[str, list[int]]  # slice → user rows with a relevant test item


def party_eval(share: PartyShare) -> PartyEval:
    """Candidates (items not in the user's train ∪ valid), relevant test items and slices of a party."""
    ds = share.dataset
    users = _users(ds)
    uidx = {u: k for k, u in enumerate(users.tolist())}
    iidx = {v: k for k, v in enumerate(share.items.tolist())}

    def rows(r: Ratings) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([uidx[u] for u in r.user_ids.astype(str).tolist()], dtype=np.int64),
                np.array([iidx[v] for v in r.item_ids.astype(str).tolist()], dtype=np.int64))
    known = [rows(r) for r in (ds.train, ds.valid) if r is not None]
    seen = ranking.seen_matrix(users.size, share.items.size, *known)
    counts = np.zeros(share.items.size, dtype=np.int64)
    for _, v in known:
        counts += np.bincount(v, minlength=share.items.size)
    tu, tv = rows(ds.test)
    # implicit: every kept test interaction is relevant (the rows ≥ the threshold, as in the explicit ≥ 4 rule)
    threshold = ranking.RELEVANT_THRESHOLD if share.feedback == "explicit" else 1.0
    relevant = ranking.relevant_sets(tu, tv, ds.test.ratings, threshold)
    aligned, cold = set(share.aligned.tolist()), set(share.cold.tolist())
    slices: dict[str, list[int]] = {s: [] for s in SLICES}
    for u in sorted(relevant):
        uid = str(users[u])
        name = "not-aligned" if uid not in aligned else "aligned-cold" if uid in cold else "aligned-warm"
        slices[name].append(u)
    return PartyEval(users, seen, relevant, counts, slices)


def place_scores(ev: PartyEval, user_ids: Sequence[str], scores: np.ndarray) -> np.ndarray:
    """(U, M) scores in the party's user order; users the model has no row for get the popularity fallback.

    The fallback is what the party serves a user its model does not know (`services.party.serving`):
    its items by training count.
    """
    out = np.tile(ev.counts.astype(np.float64), (ev.users.size, 1))
    n = min(len(user_ids), scores.shape[0])  # a model that does not train private users has no rows for them
    out[np.searchsorted(ev.users, np.asarray(user_ids[:n], dtype=str))] = scores[:n]
    return out


def slice_figures(ev: PartyEval, scores: np.ndarray) -> dict[str, dict[str, float]]:
    """NDCG@10 / recall@10 of (U, M) scores per slice (slices without a user are left out)."""
    top, _ = ranking.top_k(scores, ev.seen, K)
    out = {}
    for name, members in ev.slices.items():
        if not members:
            continue
        rel = {u: ev.relevant[u] for u in members}
        f = ranking.evaluate_lists(ranking.lists_from_top(top, members), rel, n_items=scores.shape[1],
                                   train_counts=ev.counts, ks=(K,))
        out[name] = {"users": len(members), "ndcg@10": f[f"ndcg@{K}"], "recall@10": f[f"recall@{K}"]}
    return out


def model_user_ids(share: PartyShare, data: PartyData) -> list[str]:
    """External ids of the federated model's user rows at a party: the aligned users (sorted), then its private ones."""
    return [*share.aligned.tolist(), *data.private_user_ids]


def ranking_valid_loss(datas: Mapping[str, PartyData]) -> Callable[[dict[str, np.ndarray]], float] | None:
    """1 − validation NDCG@10 pooled over the parties' users, for early stopping when no party reports rating
    errors (every party implicit); None otherwise (the validation RMSE decides, as in a coordinator run)."""
    if any(not d.implicit for d in datas.values()):
        return None
    protocol = {}
    for p, d in datas.items():
        n = d.n_users + d.n_private
        seen = ranking.seen_matrix(n, d.n_items, (d.train.users, d.train.items))
        protocol[p] = (seen, ranking.relevant_sets(d.valid.users, d.valid.items, d.valid.ratings, 0.0))

    def loss(scores: dict[str, np.ndarray]) -> float:
        total, users = 0.0, 0
        for p, (seen, relevant) in protocol.items():
            rows = scores[p].shape[0]  # a model without private rows scores the aligned users only
            rel = {u: r for u, r in relevant.items() if u < rows}
            if rel:
                f = ranking.evaluate_scores(scores[p], seen=seen[:rows], relevant=rel,
                                            train_counts=np.zeros(seen.shape[1], np.int64), ks=(K,))
                total, users = total + f[f"ndcg@{K}"] * len(rel), users + len(rel)
        return 1.0 - total / max(1, users)
    return loss


def run_configuration(shares: Mapping[str, PartyShare], *, config: TrainConfig, private: bool = True,
                      log: Callable[[str], None] = lambda _: None,
                      on_round: RoundCallback | None = None) -> list[dict[str, Any]]:
    """Train the federation, each party alone and every party's rows in one place; one row per party and
    non-empty slice (`central_*`: the same model, privacy off, with all the parties' data: the ceiling).

    `private` off: the federation trains the aligned users only and each party serves its other users
    the popularity fallback (a run before parties trained their non-aligned users).
    """
    evals = {p: party_eval(s) for p, s in shares.items()}
    off = config.model_copy(update={"use_projection": False, "use_quantization": False})
    local: dict[str, dict[str, dict[str, float]]] = {}
    for p, s in shares.items():
        data = local_data(s)
        run = topk.train_ranked({p: data}, config=off, protocol=f"local:{p}", on_round=on_round,
                                valid_loss=ranking_valid_loss({p: data}), round_ndcg=config.rank_weight > 0)
        local[p] = slice_figures(evals[p], place_scores(evals[p], _users(s.dataset).tolist(), run.scores()[p]))
        log(f"{p} alone: best round {run.result.best_round} of {run.result.rounds_run}")
    central = central_share(shares)
    cdata = local_data(central)
    crun = topk.train_ranked({"central": cdata}, config=off, protocol="central", on_round=on_round,
                             valid_loss=ranking_valid_loss({"central": cdata}), round_ndcg=config.rank_weight > 0)
    log(f"central: best round {crun.result.best_round} of {crun.result.rounds_run}")
    ceiling = {p: slice_figures(evals[p], central_block(crun.scores()["central"], central, s, evals[p]))
               for p, s in shares.items()}
    datas = federated_data(shares, private=private)
    run = topk.train_ranked(datas, config=config, protocol="federated", on_round=on_round,
                            valid_loss=ranking_valid_loss(datas), round_ndcg=config.rank_weight > 0)
    log(f"federated: best round {run.result.best_round} of {run.result.rounds_run}")
    rows = []
    for p in shares:
        fed_scores = run.scores()[p]
        ids = model_user_ids(shares[p], datas[p])
        fed = slice_figures(evals[p], place_scores(evals[p], ids, fed_scores))
        # what the party serves: the federated scores blended with its own EASE, as it fits them at publish
        served = slice_figures(evals[p], place_scores(evals[p], ids, served_scores(datas[p], fed_scores,
                                                                                   seed=config.seed).scores))
        for name in SLICES:
            if name not in fed:
                continue
            lo, fe, se = local[p][name], fed[name], served[name]
            rows.append({"party": p, "slice": name, "users": int(fe["users"]),
                         "local_ndcg@10": round(lo["ndcg@10"], 4), "federated_ndcg@10": round(fe["ndcg@10"], 4),
                         "local_recall@10": round(lo["recall@10"], 4),
                         "federated_recall@10": round(fe["recall@10"], 4),
                         "served_ndcg@10": round(se["ndcg@10"], 4), "served_recall@10": round(se["recall@10"], 4),
                         "central_ndcg@10": round(ceiling[p][name]["ndcg@10"], 4),
                         "central_recall@10": round(ceiling[p][name]["recall@10"], 4)})
    return rows
