"""Rating-prediction metrics: the project's one implementation of RMSE and MAE.

Everything scores through `error_sums` and `rmse_mae`, so a federated run (parties report the
sums, the coordinator pools them) and a centralized one compute the same numbers the same way.
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
