"""The serving score, written once: what a party trains to rank by, serves, and the harness measures.

Array-agnostic: the same lines run on numpy arrays (serving, the experiment harness) and on torch
tensors (the training loss), so the score a model is trained on is the score it is served with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

A = TypeVar("A", np.ndarray, "torch.Tensor")


def serving_scores(h_u: A, h_v: A, *, rank_bias: A | None, rating_dim: int = 0, global_bias: float = 0.0,
                   user_bias: A | None = None, item_bias: A | None = None) -> A:
    """(U, M) scores of user rows `h_u` (U, D) against item rows `h_v` (M, D), unclipped.

    Args:
        rank_bias: c_v (M,) of a model trained with the ranking objective, or None.
        rating_dim: leading coordinates the rating uses (0: all); read only without `rank_bias`.
        global_bias, user_bias (U,), item_bias (M,): μ, b_u, b_v; required without `rank_bias`.
    Returns:
        With c_v: s = h_u·h_v over every coordinate + c_v, the logit of the party's softmax ranking loss.
        Without: the unclipped predicted rating μ + b_u + b_v + h_u·h_v over the first `rating_dim`
        coordinates (unclipped, so the top of the rating scale has no ties).
    """
    if rank_bias is not None:
        return h_u @ h_v.T + rank_bias[None, :]
    if user_bias is None or item_bias is None:
        raise ValueError("a rating-only score needs user_bias and item_bias")
    d = rating_dim or h_u.shape[1]
    return global_bias + user_bias[:, None] + item_bias[None, :] + h_u[:, :d] @ h_v[:, :d].T
