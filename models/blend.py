"""A party's served ranking: its federated scores and its own local model (EASE) combined per slice of users.

Both score rows are z-scored over the user's candidates (items outside their history), then mixed as
(1 − w)·z_fed + w·z_local with one weight w per cell: aligned or not × cold (≤ `COLD_MAX` items of
history) or warm. w is picked on the party's validation split by NDCG@10 over a grid; a cell keeps
the pooled weight unless its own beats it by a paired t ≥ `T_MIN` over ≥ `MIN_USERS` users (small
cells otherwise chase noise). Validation picks the weight, so on validation the combination is never
below the better of its parts by more than that rule's tolerance. The mixed score then passes
through a per-cell logistic calibration fitted on the same validation (log-odds that the item is a
relevant validation item), which is what lets the coordinator merge several parties' lists by score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models import ease as ease_model
from models.metrics import top_k_columns

COLD_MAX = 2
GRID = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 2)
T_MIN = 2.0
MIN_USERS = 30
MAX_FIT_USERS = 2000  # validation users the fit reads (sampled): bounds its memory at large parties
K = 10
CELLS = ("aligned_warm", "aligned_cold", "private_warm", "private_cold")
LOCAL_ONLY = len(CELLS)  # calibration row of a user without a federated row (ingested after training)


def cells(aligned: np.ndarray, history: np.ndarray) -> np.ndarray:
    """Cell index of each user: 2·(not aligned) + (history ≤ COLD_MAX)."""
    return 2 * (~np.asarray(aligned, bool)).astype(np.int64) + (np.asarray(history) <= COLD_MAX).astype(np.int64)


def zscore(scores: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Each row standardized by the mean and spread of its candidates (every column scaled; rows with no spread are
    only centred)."""
    s = np.asarray(scores, np.float64)
    cand = ~seen
    n = np.maximum(cand.sum(axis=1, keepdims=True), 1)
    mean = np.where(cand, s, 0.0).sum(axis=1, keepdims=True) / n
    var = np.where(cand, (s - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / n
    return (s - mean) / np.where(var > 0, np.sqrt(var), 1.0)


def ndcg_rows(scores: np.ndarray, seen: np.ndarray, relevant: np.ndarray, k: int = K) -> np.ndarray:
    """NDCG@k of each row's top-k unseen columns (`models.metrics.ndcg_sum`, per row)."""
    top = top_k_columns(scores, seen, k)
    listed = top >= 0
    hits = np.zeros(top.shape, dtype=bool)
    hits[listed] = relevant[np.nonzero(listed)[0], top[listed]]
    discount = 1.0 / np.log2(np.arange(k) + 2)
    ideal = np.concatenate([[1.0], np.cumsum(discount)])[np.minimum(relevant.sum(axis=1), k)]
    return np.where(relevant.any(axis=1), (hits * discount).sum(axis=1) / ideal, 0.0)


def _logistic(x: np.ndarray, y: np.ndarray, iters: int = 25) -> tuple[float, float]:
    """(a, c) of P(y) = σ(a·x + c) by Newton's method (a small ridge keeps it finite on separable data)."""
    if len(x) == 0 or y.all() or not y.any():
        return 1.0, 0.0
    a, c = 1.0, float(np.log(y.mean() / (1 - y.mean())))
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(a * x + c)))
        w = p * (1 - p)
        g = np.array([((p - y) * x).sum() + 1e-3 * a, (p - y).sum()])
        h = np.array([[(w * x * x).sum() + 1e-3, (w * x).sum()], [(w * x).sum(), w.sum()]])
        step = np.linalg.solve(h + 1e-9 * np.eye(2), g)
        a, c = a - float(step[0]), c - float(step[1])
        if np.abs(step).max() < 1e-7:
            break
    return a, c


@dataclass(frozen=True)
class Blend:
    """Per-cell local weight and calibration (index `LOCAL_ONLY`: users without a federated row)."""

    weights: np.ndarray  # (len(CELLS),)
    slope: np.ndarray  # (len(CELLS) + 1,)
    intercept: np.ndarray  # (len(CELLS) + 1,)

    def mix(self, fed_z: np.ndarray | None, local_z: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """Calibrated log-odds of rows of z-scores (fed_z None: local only, the `LOCAL_ONLY` calibration)."""
        if fed_z is None:
            return self.slope[LOCAL_ONLY] * local_z + self.intercept[LOCAL_ONLY]
        w = self.weights[cell][:, None]
        return self.slope[cell][:, None] * ((1 - w) * fed_z + w * local_z) + self.intercept[cell][:, None]


def _choose(ndcg: np.ndarray, members: np.ndarray, prior: int) -> int:
    """The grid index of a cell: its own best only where it beats `prior` by a paired t ≥ T_MIN over ≥ MIN_USERS."""
    if members.sum() < MIN_USERS:
        return prior
    own = int(np.argmax(ndcg[members].mean(axis=0)))
    diff = ndcg[members, own] - ndcg[members, prior]
    sd = diff.std(ddof=1)
    t = np.inf if sd == 0 and diff.mean() > 0 else (diff.mean() / (sd / np.sqrt(len(diff))) if sd > 0 else 0.0)
    return own if t >= T_MIN else prior


def fit_blend(fed: np.ndarray, local: np.ndarray, seen: np.ndarray, relevant: np.ndarray,
              cell: np.ndarray) -> tuple[Blend, dict[str, np.ndarray]]:
    """The blend of validation rows (users with ≥ 1 relevant item) and the per-user NDCG@10 of fed, local, served."""
    fz, lz = zscore(fed, seen), zscore(local, seen)
    ndcg = np.stack([ndcg_rows((1 - w) * fz + w * lz, seen, relevant) for w in GRID], axis=1)
    pooled = int(np.argmax(ndcg.mean(axis=0))) if len(ndcg) else 0
    index = np.array([_choose(ndcg, cell == c, pooled) for c in range(len(CELLS))])
    weights = GRID[index]
    slope, intercept = np.ones(len(CELLS) + 1), np.zeros(len(CELLS) + 1)
    cand = ~seen
    for c in range(len(CELLS)):
        rows = cell == c
        if rows.any():
            w = weights[c]
            s = ((1 - w) * fz[rows] + w * lz[rows])[cand[rows]]
            slope[c], intercept[c] = _logistic(s, relevant[rows][cand[rows]])
    slope[LOCAL_ONLY], intercept[LOCAL_ONLY] = _logistic(lz[cand], relevant[cand])
    served = ndcg[np.arange(len(ndcg)), index[cell]] if len(ndcg) else np.zeros(0)
    return Blend(weights, slope, intercept), {"federated": ndcg[:, 0] if len(ndcg) else np.zeros(0),
                                              "local": ndcg[:, -1] if len(ndcg) else np.zeros(0),
                                              "served": served}


@dataclass(frozen=True)
class SliceFigures:
    """Validation NDCG@10 of one slice of a party's users: alone (local model), federated, served."""

    slice: str
    users: int
    local: float
    federated: float
    served: float

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the value report's row)."""
        return {"slice": self.slice, "users": self.users, "local_ndcg@10": self.local,
                "federated_ndcg@10": self.federated, "served_ndcg@10": self.served}


@dataclass(frozen=True)
class LocalRanking:
    """What a party serves beside its federated model: its EASE and the blend of the two."""

    ease: ease_model.Ease
    blend: Blend
    figures: list[SliceFigures] = field(default_factory=list)

    def served(self, fed: np.ndarray | None, history: Sequence[np.ndarray], aligned: np.ndarray, *,
               mask: bool = True) -> np.ndarray:
        """Calibrated log-odds of rows of users (fed None: no federated row), their history items −inf (`mask`)."""
        local = self.ease.scores(history)
        seen = np.zeros(local.shape, bool)
        for r, items in enumerate(history):
            seen[r, np.asarray(items, np.int64)] = True
        cell = cells(aligned, np.array([len(h) for h in history]))
        out = self.blend.mix(None if fed is None else zscore(fed, seen), zscore(local, seen), cell)
        return np.where(seen, -np.inf, out) if mask else out

    def served_user(self, fed: np.ndarray | None, history: np.ndarray, aligned: bool, *,
                    mask: bool = True) -> np.ndarray:
        """`served` of one user (a 1-d row)."""
        return self.served(None if fed is None else fed[None, :], [history], np.array([aligned]), mask=mask)[0]

    def to_tree(self) -> dict[str, Any]:
        """Arrays for `pack_tree` (figures ride in the release's value report, not here)."""
        return {"ease": self.ease.to_tree(), "weights": self.blend.weights, "slope": self.blend.slope,
                "intercept": self.blend.intercept}

    @staticmethod
    def from_tree(tree: dict[str, Any]) -> LocalRanking:
        """Inverse of `to_tree`."""
        blend = Blend(np.asarray(tree["weights"], np.float64), np.asarray(tree["slope"], np.float64),
                      np.asarray(tree["intercept"], np.float64))
        return LocalRanking(ease_model.Ease.from_tree(tree["ease"]), blend)


def _pairs_matrix(users: np.ndarray, items: np.ndarray, rows: np.ndarray, n_items: int) -> np.ndarray:
    """(len(rows), n_items) bool: which of `rows`' users hold each item."""
    pos = np.full(int(max(users.max(initial=-1), rows.max(initial=-1))) + 1, -1, np.int64)
    pos[rows] = np.arange(len(rows))
    out = np.zeros((len(rows), n_items), bool)
    keep = pos[users] >= 0
    out[pos[users[keep]], items[keep]] = True
    return out


def histories(users: np.ndarray, items: np.ndarray, n_users: int) -> list[np.ndarray]:
    order = np.argsort(users, kind="stable")
    bounds = np.searchsorted(users[order], np.arange(n_users + 1))
    return [items[order][bounds[u]:bounds[u + 1]] for u in range(n_users)]


def fit_local_ranking(*, n_users: int, n_items: int, train: tuple[np.ndarray, np.ndarray],
                      valid: tuple[np.ndarray, np.ndarray, np.ndarray], aligned: np.ndarray,
                      fed_rows: Callable[[np.ndarray], np.ndarray], seed: int) -> LocalRanking:
    """Fit EASE (λ on validation) and the blend on a party's split, then refit EASE on train ∪ validation.

    `valid` is (users, items, relevant flags); `fed_rows(rows)` gives the federated scores of those user rows.
    """
    tu, ti = (np.asarray(a, np.int64) for a in train)
    vu, vi, vrel = np.asarray(valid[0], np.int64), np.asarray(valid[1], np.int64), np.asarray(valid[2], bool)
    users = np.unique(vu[vrel])
    if len(users) > MAX_FIT_USERS:
        users = np.sort(np.random.default_rng(seed).choice(users, MAX_FIT_USERS, replace=False))
    seen = _pairs_matrix(tu, ti, users, n_items)
    relevant = _pairs_matrix(vu[vrel], vi[vrel], users, n_items) & ~seen
    keep = relevant.any(axis=1)
    users, seen, relevant = users[keep], seen[keep], relevant[keep]
    cols, b_of = ease_model.weights_path(tu, ti, n_items)
    x = seen[:, cols].astype(np.float64)
    best: tuple[float, float] = (-1.0, ease_model.LAMBDAS[0])
    for lam in ease_model.LAMBDAS:
        local = np.zeros((len(users), n_items))
        local[:, cols] = x @ b_of(lam)
        v = float(ndcg_rows(local, seen, relevant).mean()) if len(users) else 0.0
        if v > best[0]:
            best = (v, lam)
    lam = best[1]
    local = np.zeros((len(users), n_items))
    local[:, cols] = x @ b_of(lam)
    history = np.bincount(tu, minlength=n_users)[users]
    cell = cells(np.asarray(aligned, bool)[users], history)
    blend, per_user = fit_blend(fed_rows(users), local, seen, relevant, cell)
    figures = [SliceFigures(name, int(m.sum()), float(per_user["local"][m].mean()),
                            float(per_user["federated"][m].mean()), float(per_user["served"][m].mean()))
               for name, m in [("all", np.ones(len(users), bool))] + [(c, cell == i) for i, c in enumerate(CELLS)]
               if m.any()]
    all_u = np.concatenate([tu, vu])
    all_i = np.concatenate([ti, vi])
    return LocalRanking(ease_model.fit(all_u, all_i, n_items, lam), blend, figures)


__all__ = ["Blend", "LocalRanking", "SliceFigures", "cells", "fit_blend", "fit_local_ranking", "ndcg_rows",
           "zscore", "histories"]
