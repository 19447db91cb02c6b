"""The party's rating component at publish: fitted on the run's own data, stored in the serving model.

The component and its combination are `services.verfedgnn.rating_component`'s (the same fit the
experiments run); nothing here leaves the party: `ServingModel.scores` serves the combination.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from services.party.serving import ServingModel
from services.verfedgnn.rating_component import (
    ComponentConfig,
    FittedComponent,
    cut_component_rows,
    fit_component,
)
from services.verfedgnn.types import PartyData

__all__ = ["ComponentConfig", "FittedComponent", "cut_component_rows", "fit_component", "served_valid_sums",
           "with_component"]


def with_component(model: ServingModel, *, data: Any, seed: int,
                   config: ComponentConfig = ComponentConfig()) -> tuple[ServingModel, FittedComponent | None]:
    """`model` with the party's component fitted on `data` (the run's PartyData, in the model's indices)
    attached, and the fit; the model unchanged (and None) when there is nothing to fit or the
    combination is not better than the federated model on validation."""
    if (not isinstance(data, PartyData) or model.feedback == "implicit" or model.rating_component is not None
            or len(model.user_ids) != data.n_users + data.n_private or len(model.item_ids) != data.n_items):
        return model, None
    fitted = fit_component(data=data, base=model.scores, config=config, seed=seed)
    if fitted is None or not fitted.valid_rmse["combined"] <= fitted.valid_rmse["federated"]:
        return model, None
    return replace(model, rating_component=fitted.tree), fitted


def served_valid_sums(model: ServingModel, *, data: Any) -> tuple[float, int] | None:
    """(Σ squared error, count) of `model`'s served ratings on `data`'s validation split (None: none to score)."""
    if not isinstance(data, PartyData) or data.implicit or model.feedback == "implicit" or len(data.valid) == 0:
        return None
    if len(model.user_ids) != data.n_users + data.n_private or len(model.item_ids) != data.n_items:
        return None
    va = data.valid
    err = model.scores(va.users, va.items) - va.ratings.astype(np.float64)
    return float(np.sum(err ** 2)), len(va)
