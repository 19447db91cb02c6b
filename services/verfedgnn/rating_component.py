"""A party's own rating component: fitted on its own data (`services.party.rating_component` at publish,
`services.evaluation.rating_component` in experiments), served with its model.

The party trains I-AutoRec (`models.autorec`) on its training ratings (its catalogue, every user it
holds), then combines it with the federated prediction by the never-worse per-slice least squares of
`models.rating_blend`, fitted on its validation split. Nothing here leaves the party: the component is
stored inside the party's serving model and `ServingModel.scores` applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from models import rating_blend
from models.autorec import AutoRecConfig, fit_item_autorec
from models.rating_blend import PER_USER, cut_component_rows
from services.verfedgnn.types import PartyData

__all__ = ["PER_USER", "ComponentConfig", "FittedComponent", "cut_component_rows", "fit_component"]

MIN_VALID = 20  # fewer validation ratings than this: no combination is fitted (the federated model serves alone)


class ComponentConfig(BaseModel):
    """The rating component's settings (defaults picked on ML-100K u1, docs/results-rating-component.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    autorec: AutoRecConfig = AutoRecConfig()
    shrink: float = Field(200.0, ge=0.0)  # λ pulling each slice's weights toward the global fit


@dataclass(frozen=True)
class FittedComponent:
    """The stored component (arrays only) and its validation figures at fit time."""

    tree: dict[str, np.ndarray]
    valid_rmse: dict[str, float]  # "federated", "component", "combined"

    def predict(self, *, users: np.ndarray, items: np.ndarray, base: np.ndarray, low: float,
                high: float) -> np.ndarray:
        """The combination for pairs whose federated prediction is `base`."""
        return rating_blend.apply_tree(self.tree, users=users, items=items, base=base, low=low, high=high)

    def component(self, *, users: np.ndarray, items: np.ndarray, low: float, high: float) -> np.ndarray:
        """The local component alone, clipped."""
        t = self.tree
        raw = (np.einsum("nd,nd->n", t["user_weight"][users].astype(np.float64), t["item_code"][items].astype(np.float64))
               + t["user_offset"][users])
        return np.clip(raw, low, high)


def fit_component(*, data: PartyData, base: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  config: ComponentConfig, seed: int) -> FittedComponent | None:
    """Train the component on `data`'s training ratings and the combination on its validation ratings.

    `base(users, items)` is the federated model's clipped prediction in `data`'s indices (aligned users
    first, then the party's private users). None when disabled, implicit, or too few validation ratings.
    """
    n_users = data.n_users + data.n_private
    if not config.enabled or data.implicit or len(data.valid) < MIN_VALID or len(data.train) == 0:
        return None
    low, high = data.rating_min, data.rating_max
    tr = data.train
    ae = fit_item_autorec(users=tr.users, items=tr.items, ratings=tr.ratings, n_users=n_users, n_items=data.n_items,
                          config=config.autorec, seed=seed)
    user_counts = np.bincount(tr.users, minlength=n_users)
    item_counts = np.bincount(tr.items, minlength=data.n_items)
    tree = {"item_code": ae.item_code, "user_weight": ae.user_weight, "user_offset": ae.user_offset,
            "user_group": rating_blend.user_group(user_counts, np.arange(n_users) >= data.n_users),
            "item_bucket": rating_blend.bucket(item_counts, rating_blend.ITEM_EDGES)}
    va = data.valid
    fed = np.asarray(base(va.users, va.items), np.float64)
    local = np.clip(ae.predict(va.users, va.items), low, high)
    x = rating_blend.design([fed, local])
    slices = rating_blend.slice_of(tree["user_group"][va.users], tree["item_bucket"][va.items])
    weights = rating_blend.fit_blend(x=x, y=va.ratings, slices=slices, n_slice=rating_blend.n_slices(),
                                     shrink=config.shrink)
    combined = rating_blend.combine(x=x, slices=slices, weights=weights, low=low, high=high)
    tree["weights"] = weights
    y = va.ratings.astype(np.float64)
    return FittedComponent(tree, {"federated": rating_blend.rmse(fed, y), "component": rating_blend.rmse(local, y),
                                  "combined": rating_blend.rmse(combined, y)})


def from_tree(tree: dict[str, Any]) -> FittedComponent:
    """A stored component (figures not stored: nan)."""
    nan = float("nan")
    return FittedComponent({k: np.asarray(v) for k, v in tree.items()},
                           {"federated": nan, "component": nan, "combined": nan})


