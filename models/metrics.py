"""Rating-prediction metrics: the project's one implementation of RMSE and MAE; the ranking sums parties report.

Everything scores through `error_sums` and `rmse_mae`, so a federated run (parties report the
sums, the coordinator pools them) and a centralized one compute the same numbers the same way.
`top_k_columns` and `ndcg_sum` are the validation NDCG a VerFedGNN party reports each round (the
harness's `services.evaluation.ranking` lists, exactly, in O(M) a row).
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import torch

Array = TypeVar("Array", torch.Tensor, np.ndarray)


def error_sums(pred: Array, target: Array) -> tuple[float, float, int]:
    """(Σ err², Σ |err|, n) of err = pred − target over a 1-d batch, summed in the inputs' dtype."""
    err = pred - target
    return float((err * err).sum()), float(abs(err).sum()), int(err.shape[0])


def rmse_mae(sse: float, sae: float, count: int) -> tuple[float, float]:
    """RMSE = sqrt(sse / n) and MAE = sae / n (nan when there is nothing to score)."""
    if count == 0:
        return math.nan, math.nan
    return float(np.sqrt(sse / count)), float(sae / count)


def rmse(pred: Array, target: Array) -> float:
    """Root mean squared error."""
    return rmse_mae(*error_sums(pred, target))[0]


def mae(pred: Array, target: Array) -> float:
    """Mean absolute error."""
    return rmse_mae(*error_sums(pred, target))[1]


RELEVANT_THRESHOLD = 4.0  # a rating >= this is a relevant item (SPEC §5)


def top_k_columns(scores: np.ndarray, seen: np.ndarray, k: int) -> np.ndarray:
    """Exactly `services.evaluation.ranking.top_k(scores, seen, k)[0]`, by partial selection (O(M) a row, no
    full sort).

    The k best of each row are picked unordered (argpartition), then ordered as `top_k` orders them
    (score descending, lower column first). Only where the k-th score is tied with a column left out
    could the pick differ from `top_k`'s; those rows (rare with real-valued scores) are sorted fully.
    """
    s = np.where(seen, -np.inf, scores)  # no float64 copy: widening is exact, so the order is top_k's
    n_rows, m = s.shape
    k_eff = min(k, m)
    out = np.full((n_rows, k), -1, dtype=np.int64)
    if k_eff == 0 or n_rows == 0:
        return out
    idx = np.argpartition(-s, k_eff - 1, axis=1)[:, :k_eff]
    vals = np.take_along_axis(s, idx, axis=1)
    order = np.lexsort((idx, -vals), axis=1)
    idx, vals = np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
    kth = vals[:, -1]
    tied = np.isfinite(kth) & ((s == kth[:, None]).sum(axis=1) > (vals == kth[:, None]).sum(axis=1))
    for r in np.flatnonzero(tied):
        idx[r] = np.argsort(-s[r], kind="stable")[:k_eff]
        vals[r] = s[r, idx[r]]
    out[:, :k_eff] = np.where(np.isfinite(vals), idx, -1)
    return out


def merge_order(scores: np.ndarray, k: int, *, demoted: np.ndarray | None = None) -> np.ndarray:
    """The ranking merge: positions of the first k entries of lists concatenated in party order, by score
    descending, ties in that order (a stable sort); `demoted` entries (fallbacks on another scale) after all others.

    Works on one merged list (1-D) or one per row (2-D, along the last axis); what the coordinator's fan-out
    and the experiments' merged top-K both use.
    """
    keys: list[np.ndarray] = [-np.asarray(scores, dtype=np.float64)]
    if demoted is not None:
        keys.append(np.asarray(demoted, dtype=bool))  # lexsort's last key is its primary one
    return np.lexsort(keys, axis=-1)[..., :k]


def ndcg_sum(scores: np.ndarray, seen: np.ndarray, relevant: np.ndarray, k: int) -> float:
    """Σ over rows of NDCG@k (`services.evaluation.ranking.ndcg_at_k`) of the row's top-k unseen columns, `relevant` a (U, M) bool matrix;
    the sum, not the mean, so figures of several parties (or blocks of users) pool by adding. Vectorized:
    rows without a relevant column count 0."""
    top = top_k_columns(scores, seen, k)
    listed = top >= 0
    hits = np.zeros(top.shape, dtype=bool)
    hits[listed] = relevant[np.nonzero(listed)[0], top[listed]]
    discount = 1.0 / np.log2(np.arange(k) + 2)
    dcg = (hits * discount).sum(axis=1)
    ideal = np.concatenate([[1.0], np.cumsum(discount)])[np.minimum(relevant.sum(axis=1), k)]  # [0]: unused
    return float(np.where(relevant.any(axis=1), dcg / ideal, 0.0).sum())
