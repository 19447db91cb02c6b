"""The federated protocol with each party's rating component (`services.party.rating_component`).

Trains the federation in-process as `harness.train_federation` does, keeps every party's serving model
of the best validation round (what a release stages), then fits each party's component and combination
exactly as a party does at publish time, and scores the test split: the served combination, the
federated model alone and the component alone, pooled over the parties' test ratings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.evaluation.harness import Federation, RoundCallback, RunResult, own_metrics, train_rounds
from services.verfedgnn.config import TrainConfig
from services.verfedgnn.coordinator import CoordinatorTrainer
from services.verfedgnn.party import PartyTrainer
from services.verfedgnn.rounds import InProcessFederation
from services.verfedgnn.rating_component import ComponentConfig, FittedComponent, fit_component
from services.verfedgnn.types import PartyData


@dataclass
class BlendedRun:
    """A federated run's test figures: served combination, federated alone, component alone (pooled)."""

    run: RunResult
    rmse: float
    mae: float
    rmse_unblended: float
    mae_unblended: float
    rmse_component: float
    mae_component: float
    per_party: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class FederatedScores:
    """A party's kept model's rating, r̂ = μ + b_u + b_v + h_u[:d]·h_v[:d] clipped: what
    `ServingModel.scores` answers without a component (tests/e2e/test_rating_component_http.py holds them equal)."""

    sm: dict[str, Any]  # a trainer's serving_model()
    low: float
    high: float

    def scores(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Clipped federated predictions for parallel index arrays."""
        sm = self.sm
        d = int(sm.get("rating_dim", 0)) or sm["user_repr"].shape[1]
        n, m = sm["user_repr"].shape[0], sm["item_repr"].shape[0]
        ub = np.asarray(sm.get("user_bias", np.zeros(n)), np.float32).reshape(n)
        ib = np.asarray(sm.get("item_bias", np.zeros(m)), np.float32).reshape(m)
        mu = float(np.asarray(sm.get("global_bias", 0.0)).reshape(-1)[0])
        hu, hv = np.asarray(sm["user_repr"], np.float32), np.asarray(sm["item_repr"], np.float32)
        raw = mu + ub[users] + ib[items] + np.einsum("nd,nd->n", hu[users, :d], hv[items, :d])
        return np.clip(raw, self.low, self.high)


def _errors(pred: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    d = np.asarray(pred, np.float64) - y
    return float((d ** 2).sum()), float(np.abs(d).sum()), len(d)


def _pooled(rows: list[tuple[float, float, int]]) -> tuple[float, float]:
    sse, sae, n = (sum(r[k] for r in rows) for k in range(3))
    return (float(np.sqrt(sse / n)), float(sae / n)) if n else (float("nan"), float("nan"))


def component_for(base: Callable[[np.ndarray, np.ndarray], np.ndarray], data: PartyData, *,
                  config: ComponentConfig, seed: int) -> FittedComponent | None:
    """The party's component for a published model whose federated rating is `base` (the publish-time fit)."""
    return fit_component(data=data, base=base, config=config, seed=seed)


def run_blended(fed: Federation | Sequence[PartyData], *, config: TrainConfig, component: ComponentConfig,
                global_mean: float | None = None, on_round: RoundCallback | None = None) -> BlendedRun:
    """Train the federation (privacy as configured), then fit and score every party's component."""
    parties = list(fed.parties) if isinstance(fed, Federation) else list(fed)
    mean = fed.global_mean if isinstance(fed, Federation) else float(global_mean or 0.0)
    coord = CoordinatorTrainer(config=config, n_users=parties[0].n_users,
                               item_counts={p.party_id: p.n_items for p in parties}, global_mean=mean)
    trainers = {p.party_id: PartyTrainer(config=config, data=p, seed=config.seed) for p in parties}
    inproc = InProcessFederation(coordinator=coord, parties=trainers)
    kept: dict[str, FederatedScores] = {}

    def keep(t: int) -> None:  # the best round's models, as `keep_best` stores them at a party
        for p in parties:
            kept[p.party_id] = FederatedScores(trainers[p.party_id].serving_model(), p.rating_min, p.rating_max)

    run = train_rounds(lambda t: own_metrics(inproc.run_round(t), trainers), config=config, protocol="federated",
                       on_round=on_round, on_best=keep)
    rows: dict[str, list[tuple[float, float, int]]] = {"served": [], "federated": [], "component": []}
    per_party = {}
    for p in parties:
        model, te = kept[p.party_id], p.test
        if p.implicit or len(te) == 0:
            continue
        y = te.ratings.astype(np.float64)
        base = model.scores(te.users, te.items)
        fitted = component_for(model.scores, p, config=component, seed=config.seed)
        low, high = p.rating_min, p.rating_max
        served = base if fitted is None else fitted.predict(users=te.users, items=te.items, base=base, low=low,
                                                            high=high)
        alone = base if fitted is None else fitted.component(users=te.users, items=te.items, low=low, high=high)
        for key, pred in (("served", served), ("federated", base), ("component", alone)):
            rows[key].append(_errors(pred, y))
        per_party[p.party_id] = {"rmse": _pooled([rows["served"][-1]])[0],
                                 "rmse_unblended": _pooled([rows["federated"][-1]])[0],
                                 "rmse_component": _pooled([rows["component"][-1]])[0],
                                 **({} if fitted is None else {f"valid_{k}": v for k, v in fitted.valid_rmse.items()})}
    (r, m), (ru, mu), (rc, mc) = (_pooled(rows[k]) for k in ("served", "federated", "component"))
    return BlendedRun(run, r, m, ru, mu, rc, mc, per_party)
