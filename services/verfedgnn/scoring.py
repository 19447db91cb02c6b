"""The ranking score a party serves, written once for the serving path and the experiment harness."""

from __future__ import annotations

import numpy as np


def rank_scores(h_u: np.ndarray, h_v: np.ndarray, *, rank_bias: np.ndarray | None, rating_dim: int,
                global_bias: float, user_bias: np.ndarray, item_bias: np.ndarray) -> np.ndarray:
    """(U, M) ranking scores of user rows `h_u` (U, D) against item rows `h_v` (M, D), unclipped.

    With the ranking objective (a `rank_bias` c_v exists): s = h_u·h_v over every coordinate + c_v,
    the logit of the party's softmax. A rating-only model ranks by its unclipped predicted rating
    μ + b_u + b_v + h_u·h_v over the first `rating_dim` coordinates (0: all).
    """
    if rank_bias is not None:
        return h_u @ h_v.T + rank_bias[None, :]
    d = rating_dim or h_u.shape[1]
    return global_bias + user_bias[:, None] + item_bias[None, :] + h_u[:, :d] @ h_v[:, :d].T
