"""The serving hot path: everything a top-K needs that does not depend on the request, built with the snapshot.

A user's served score of every item is one affine map of two rows, in float32:

    s = a_f · (W x_u) + a_l · (x_hist B) + b,   the user's own items −inf,

where W x_u is the federated score (`ServingModel.user_scores`: one mat-vec over the item matrix),
x_hist B the party's EASE row (a sparse row-sum over the history) and (a_f, a_l, b) fold the blend
(`models.blend`) for that user: the z-score statistics of both rows over its candidates, its cell's
weight and its cell's logistic calibration. Without a local ranking a_f = 1, a_l = b = 0 (the federated
score as served before the blend). `build` computes (a_f, a_l, b) and the `PRECOMPUTED_K` best items of
every user once per snapshot, in chunks (one matrix product and one partial sort a chunk), so a request
with k ≤ `PRECOMPUTED_K` reads a slice; a larger k, or a request before the lists are built, scores its
row here (one mat-vec and one partial sort). `reference_served` in tests/unit/party/test_hot_path.py
is the blend computed the way serving did before (float64, per request); the test holds both equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from models.blend import CELLS, COLD_MAX, LOCAL_ONLY, LocalRanking

if TYPE_CHECKING:
    from services.party.serving import ServingModel

PRECOMPUTED_K = 100  # a user's list is kept this long: the apps' and the coordinator's k (10) with room
CHUNK = 128  # users scored at once by `build` (two float32 (CHUNK, M) rows at most: 50 MB at 50k items)
POPULARITY, MODEL, LOCAL = 0, 1, 2  # what ranks a user: popularity counts, the model (blended), EASE alone


@dataclass(frozen=True)
class HotLists:
    """Per snapshot user row: what ranks it, its affine map and its `PRECOMPUTED_K` best items, best first."""

    kind: np.ndarray  # int8 (U,): POPULARITY, MODEL or LOCAL
    affine: np.ndarray  # float32 (U, 3): a_f, a_l, b
    top: np.ndarray  # int32 (U, C): model item indices, -1 past the user's candidates
    top_scores: np.ndarray  # float32 (U, C)


@dataclass(frozen=True)
class Scorer:
    """The request-independent side of one model: item matrix (transposed), EASE as CSR, the blend."""

    model: ServingModel
    matrix_t: np.ndarray  # float64 (D', M), C-contiguous: one gemv reads it row by row
    ease: sp.csr_matrix | None  # float32 (M, M): B's rows (None: no local ranking)
    local: LocalRanking | None

    @staticmethod
    def of(model: ServingModel) -> Scorer:
        """The scorer of a model (its local ranking's EASE converted once)."""
        local = model.local_ranking
        ease = None
        if local is not None:
            e = local.ease
            ease = sp.csr_matrix((e.data.astype(np.float32), e.indices, e.indptr), shape=(e.n_items, e.n_items))
        # the product runs in float64 and is rounded to float32 once: a row then scores the same alone (a request)
        # as in a chunk of the precomputed lists (float32 GEMV and GEMM round differently), so one release always
        # serves the same scores
        return Scorer(model, np.ascontiguousarray(model.item_matrix.T, dtype=np.float64), ease, local)

    def vectors(self, model_rows: np.ndarray) -> np.ndarray:
        """The user side of `ServingModel.user_scores` for model rows (n, D'), float32."""
        m = self.model
        d_all = self.matrix_t.shape[0]
        out = np.empty((len(model_rows), d_all), np.float32)
        if m.rank_bias is not None:
            out[:, :-1], out[:, -1] = m.h_u[model_rows], 1.0
        else:
            out[:, :-2] = m.h_u[model_rows, :d_all - 2]
            out[:, -2] = 1.0
            out[:, -1] = m.global_bias + m.user_bias[model_rows].astype(np.float32)
        return out

    def kinds(self, model_row: np.ndarray, history: np.ndarray) -> np.ndarray:
        """What ranks each user: its model row, else EASE alone when it has a history and a local ranking."""
        kind = np.where(model_row >= 0, MODEL, POPULARITY).astype(np.int8)
        if self.local is not None:
            kind[(model_row < 0) & (history > 0)] = LOCAL
        return kind

    def score_rows(self, model_row: np.ndarray, ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray, *,
                   affine: np.ndarray | None = None, mask: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(served scores (n, M) float32, their affine maps (n, 3)) of snapshot rows that are not POPULARITY.

        `ptr`/`idx` are the snapshot's rated CSR; `affine` the rows' stored maps (None: computed here, from the
        rows' statistics); `mask` sets the users' own items to −inf.
        """
        n, m = len(rows), self.matrix_t.shape[1]
        starts, ends = ptr[rows], ptr[rows + 1]
        lengths = ends - starts
        hist = idx[np.concatenate([np.arange(s, e) for s, e in zip(starts.tolist(), ends.tolist())])
                   if n else np.empty(0, np.int64)]
        owner = np.repeat(np.arange(n), lengths)
        seen = np.zeros((n, m), bool)
        seen[owner, hist] = True
        mrows = model_row[rows]
        warm = mrows >= 0
        fed = np.zeros((n, m), np.float32)
        if warm.any():
            fed[warm] = self.vectors(mrows[warm]).astype(np.float64) @ self.matrix_t
        if self.ease is None:
            out, affine = fed, np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
        else:
            x = sp.csr_matrix((np.ones(len(hist), np.float32), (owner, hist)), shape=(n, m))
            local = np.asarray((x @ self.ease).todense(), np.float32)
            if affine is None:
                affine = self._fold(fed, local, seen, warm, np.asarray(self.model.aligned[mrows] if
                                    self.model.aligned is not None else np.ones(n, bool)), lengths)
            out = fed
            out *= affine[:, :1]
            local *= affine[:, 1:2]
            out += local
            out += affine[:, 2:]
        if mask:
            out[seen] = -np.inf
        return out, affine

    def _fold(self, fed: np.ndarray, local: np.ndarray, seen: np.ndarray, warm: np.ndarray, aligned: np.ndarray,
              history: np.ndarray) -> np.ndarray:
        """(a_f, a_l, b) per row: z-scores over the candidates (`models.blend.zscore`), cell weight, calibration."""
        assert self.local is not None
        blend = self.local.blend
        mean_f, sd_f = _stats(fed, seen)
        mean_l, sd_l = _stats(local, seen)
        cell = 2 * (~aligned).astype(np.int64) + (history <= COLD_MAX).astype(np.int64)
        cell = np.where(warm, cell, LOCAL_ONLY)
        w = np.where(warm, blend.weights[np.minimum(cell, len(CELLS) - 1)], 1.0)
        slope, icpt = blend.slope[cell], blend.intercept[cell]
        a_f = np.where(warm, slope * (1 - w) / sd_f, 0.0)
        a_l = slope * w / sd_l
        b = icpt - a_f * mean_f - a_l * mean_l
        return np.stack([a_f, a_l, b], axis=1).astype(np.float32)


def _stats(scores: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and spread (1 where there is none) of each row over its candidates, in float64 as `zscore`."""
    cand = ~seen
    n = np.maximum(cand.sum(axis=1), 1)
    s = scores.astype(np.float64)
    s[seen] = 0.0
    mean = s.sum(axis=1) / n
    s -= mean[:, None]
    s[seen] = 0.0
    var = np.einsum("ij,ij->i", s, s) / n
    return mean, np.where(var > 0, np.sqrt(var), 1.0)


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, scores) of each row's k best, best first (ties: lower index first), -1 past the finite ones.

    `models.metrics.top_k_columns` without its mask copy: one partial sort a row, a full stable sort only for
    a row whose k-th score ties with one left out.
    """
    n, m = scores.shape
    k = min(k, m)
    if k == 0 or n == 0:
        return np.full((n, k), -1, np.int32), np.zeros((n, k), np.float32)
    idx = np.argpartition(scores, m - k, axis=1)[:, m - k:]
    vals = np.take_along_axis(scores, idx, axis=1)
    order = np.lexsort((idx, -vals), axis=1)
    idx, vals = np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
    kth = vals[:, -1]
    tied = np.isfinite(kth) & ((scores == kth[:, None]).sum(axis=1) > (vals == kth[:, None]).sum(axis=1))
    for r in np.flatnonzero(tied).tolist():
        idx[r] = np.argsort(-scores[r], kind="stable")[:k]
        vals[r] = scores[r, idx[r]]
    return np.where(np.isfinite(vals), idx, -1).astype(np.int32), vals.astype(np.float32)


def build(scorer: Scorer, model_row: np.ndarray, ptr: np.ndarray, idx: np.ndarray, *,
          k: int = PRECOMPUTED_K, stop: Callable[[], bool] = lambda: False) -> HotLists | None:
    """Every user's affine map and k best items, CHUNK users at a time (None when `stop` says so between chunks)."""
    users = len(model_row)
    kind = scorer.kinds(model_row, np.diff(ptr))
    k = min(k, scorer.matrix_t.shape[1])
    affine = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (users, 1))
    top, top_scores = np.full((users, k), -1, np.int32), np.zeros((users, k), np.float32)
    ranked = np.flatnonzero(kind != POPULARITY)
    for start in range(0, len(ranked), CHUNK):
        if stop():
            return None
        rows = ranked[start:start + CHUNK]
        scores, affine[rows] = scorer.score_rows(model_row, ptr, idx, rows)
        top[rows], top_scores[rows] = top_rows(scores, k)
    return HotLists(kind, affine, top, top_scores)
