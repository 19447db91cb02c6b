"""The party's rating component at publish: fitted on the run's own data, stored in the serving model.

The protocol fits it (`ProtocolPlan.fit_rating`: VerFedGNN's is `services.verfedgnn.rating_component`, the
same fit the experiments run); nothing here leaves the party: `ServingModel.scores` serves the combination.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from services.federation.plan import ProtocolPlan
from services.party.serving import ServingModel


def with_component(model: ServingModel, *, plan: ProtocolPlan, data: Any, seed: int) -> ServingModel:
    """`model` with the party's component fitted on `data` (the run's data, in the model's indices) attached;
    unchanged when there is nothing to fit or the combination is not better than the federated model on
    validation."""
    if model.feedback == "implicit" or model.rating_component is not None:
        return model
    tree = plan.fit_rating(data, base=model.scores, n_users=len(model.user_ids), n_items=len(model.item_ids),
                           seed=seed)
    return model if tree is None else replace(model, rating_component=tree)


def served_valid_sums(model: ServingModel, *, plan: ProtocolPlan, data: Any) -> tuple[float, int] | None:
    """(Σ squared error, count) of `model`'s served ratings on `data`'s validation split (None: none to score)."""
    if model.feedback == "implicit":
        return None
    valid = plan.valid_ratings(data, n_users=len(model.user_ids), n_items=len(model.item_ids))
    if valid is None or len(valid[0]) == 0:
        return None
    users, items, ratings = valid
    err = model.scores(users, items) - ratings.astype(np.float64)
    return float(np.sum(err ** 2)), len(users)
