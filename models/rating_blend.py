"""Never-worse combination of rating predictors, per slice, fitted on a validation split.

Predictors x = [1, p_1, …, p_P] (p_1: the federated prediction; the others local components). One
global weight vector w_g is the unpenalized least-squares fit on every validation rating; each slice s
(a user history-length bucket × an item rating-count bucket × aligned or not) gets
w_s = argmin ‖y_s − X_s w‖² + λ‖w − w_g‖², ridge shrunk toward w_g. In-sample this cannot be worse
than any single predictor: w_g's squared error is at most that of x·e_k (any predictor alone), each
w_s's at most w_g's on its slice, and clipping to the rating range only removes error.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing import Any

import numpy as np

# Edges of the count buckets: bucket b holds counts in [EDGES[b-1], EDGES[b]) (bucket 0: below EDGES[0]).
USER_EDGES = (1, 10, 30, 100)
ITEM_EDGES = (1, 10, 30, 100)


def bucket(counts: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """Bucket index of each count (0 .. len(edges))."""
    return np.searchsorted(np.asarray(edges), np.asarray(counts), side="right").astype(np.int64)


def n_slices() -> int:
    """How many slices the buckets make (aligned and private users apart)."""
    return 2 * (len(USER_EDGES) + 1) * (len(ITEM_EDGES) + 1)


def user_group(counts: np.ndarray, private: np.ndarray) -> np.ndarray:
    """Each user's group: its history-length bucket, private users (outside the intersection) apart."""
    return np.asarray(private, np.int64) * (len(USER_EDGES) + 1) + bucket(counts, USER_EDGES)


def slice_of(group: np.ndarray, item_bucket: np.ndarray) -> np.ndarray:
    """Slice index of each (user, item) pair from the user's group and the item's bucket."""
    return np.asarray(group, np.int64) * (len(ITEM_EDGES) + 1) + item_bucket


def design(predictions: list[np.ndarray]) -> np.ndarray:
    """X = [1, p_1, …, p_P] (float64)."""
    n = len(predictions[0])
    return np.column_stack([np.ones(n)] + [np.asarray(p, np.float64) for p in predictions])


def fit_blend(*, x: np.ndarray, y: np.ndarray, slices: np.ndarray, n_slice: int, shrink: float) -> np.ndarray:
    """Weights (n_slice, P + 1): the global least-squares fit, each slice ridge-shrunk toward it by `shrink`."""
    y = np.asarray(y, np.float64)
    w_g = np.linalg.lstsq(x, y, rcond=None)[0]
    weights = np.tile(w_g, (n_slice, 1))
    eye = np.eye(x.shape[1])
    for s in np.unique(slices):
        rows = slices == s
        xs, ys = x[rows], y[rows]
        # (X'X + λI) w = X'y + λ w_g: the minimizer of ‖y − Xw‖² + λ‖w − w_g‖²
        weights[s] = np.linalg.solve(xs.T @ xs + shrink * eye, xs.T @ ys + shrink * w_g)
    return weights


def combine(*, x: np.ndarray, slices: np.ndarray, weights: np.ndarray, low: float, high: float) -> np.ndarray:
    """The blended rating of each row, clipped to [low, high]."""
    return np.clip(np.einsum("np,np->n", x, weights[slices]), low, high)


def rmse(pred: np.ndarray, y: np.ndarray) -> float:
    """Root mean squared error (nan when empty)."""
    return float(np.sqrt(np.mean((np.asarray(pred, np.float64) - y) ** 2))) if len(y) else float("nan")


def apply_tree(tree: Mapping[str, np.ndarray], *, users: np.ndarray, items: np.ndarray, base: np.ndarray,
               low: float, high: float) -> np.ndarray:
    """The served combination from a stored component (`services.party.rating_component.to_tree`)."""
    ae = (np.einsum("nd,nd->n", tree["user_weight"][users].astype(np.float64),
                    tree["item_code"][items].astype(np.float64)) + tree["user_offset"][users])
    sl = slice_of(tree["user_group"][users], tree["item_bucket"][items])
    x = design([base, np.clip(ae, low, high)])
    return combine(x=x, slices=sl, weights=np.asarray(tree["weights"], np.float64), low=low, high=high)


PER_USER = ("user_weight", "user_offset", "user_group")  # the stored component's arrays with one row per user


def cut_component_rows(tree: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    """The stored component without the users whose `keep` is false (erasure: their rows of W, b, group)."""
    return {k: (np.asarray(v)[keep] if k in PER_USER else v) for k, v in tree.items()}
