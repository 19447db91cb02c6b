"""The P4GCN trainer of the rating party (protocol `social-gnn`, paper §4.3).

The rating party trains LightGCN + fusion + decoder locally; once per epoch it uploads its clipped
user features X, then for each batch of users (the batches partition the users) it gets the noisy
forward product, trains on those users' ratings, sends the clipped gradient dL/dY for the noisy
backward product, and pushes the batch's updated rows of X. Evaluation reuses each user's last
noisy social product (post-processing: no extra privacy cost). Early stopping on validation RMSE.
Optionally the rating party evaluates and keeps an exponential moving average of its own weights
(`ema_decay`; the live weights train and X is still taken from the live embeddings), which smooths
the noisy per-batch updates: a local choice with no effect on what is released or its privacy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from pydantic import BaseModel, ConfigDict, Field

from models.lightgcn import normalized_bipartite
from models.metrics import error_sums, rmse_mae
from models.p4gcn import P4GCN, P4GCNConfig
from services.crypto.dp import clip_rows
from services.data.types import Dataset, Ratings
from services.p4gcn.backends import SocialProductBackend
from services.p4gcn.graph import adjacency_from_links


class SocialTrainConfig(BaseModel):
    """Training schedule at the rating party (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int = Field(30, ge=1)
    user_batch: int = Field(64, ge=1)
    lr: float = Field(5e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    patience: int = Field(5, ge=1)
    clip_norm: float = Field(1.0, gt=0.0)
    backward_weight: float = Field(1.0, ge=0.0)  # weight of the social gradient on X (0: skip backward)
    ema_decay: float = Field(0.0, ge=0.0, lt=1.0)  # >0: evaluate/keep an exponential moving average of the weights
    seed: int = 0


@dataclass(frozen=True)
class Triples:
    """Indexed ratings."""

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray


@dataclass(frozen=True)
class SocialData:
    """A social-recommendation data set indexed for the two parties."""

    user_ids: np.ndarray
    n_items: int
    train: Triples
    valid: Triples
    test: Triples
    adjacency: sp.csr_matrix  # held by the social party only
    rating_min: float
    rating_max: float

    @property
    def n_users(self) -> int:
        """Number of aligned users."""
        return len(self.user_ids)


@dataclass
class SocialRunResult:
    """Test figures at the epoch with the best validation RMSE."""

    rmse: float
    mae: float
    best_epoch: int
    epochs_run: int
    valid_history: list[float] = field(default_factory=list)
    privacy: dict[str, Any] = field(default_factory=dict)
    traffic: dict[str, int] = field(default_factory=dict)
    valid_pred: np.ndarray = field(default_factory=lambda: np.zeros(0))  # at the best epoch, for slices/fusion
    test_pred: np.ndarray = field(default_factory=lambda: np.zeros(0))


def index_dataset(dataset: Dataset) -> SocialData:
    """Index users/items over all splits; build the symmetric social adjacency over those users."""
    if dataset.valid is None or dataset.social is None:
        raise ValueError("social-gnn needs a validation split and social links")
    splits: list[Ratings] = [dataset.train, dataset.valid, dataset.test]
    users = np.unique(np.concatenate([s.user_ids.astype(str) for s in splits]))
    items = np.unique(np.concatenate([s.item_ids.astype(str) for s in splits]))
    uidx = {u: k for k, u in enumerate(users)}
    iidx = {v: k for k, v in enumerate(items)}

    def tri(r: Ratings) -> Triples:
        return Triples(np.array([uidx[u] for u in r.user_ids.astype(str)], dtype=np.int64),
                       np.array([iidx[v] for v in r.item_ids.astype(str)], dtype=np.int64),
                       r.ratings.astype(np.float32))

    return SocialData(users, len(items), tri(dataset.train), tri(dataset.valid), tri(dataset.test),
                      adjacency_from_links(dataset.social, list(users)), dataset.rating_min, dataset.rating_max)


def build_model(data: SocialData, config: P4GCNConfig) -> P4GCN:
    """P4GCN over the training rating graph; the decoder's range is the data's rating range."""
    adj = normalized_bipartite(data.train.users, data.train.items, data.n_users, data.n_items)
    config = config.model_copy(update={"rating_min": data.rating_min, "rating_max": data.rating_max})
    return P4GCN(config=config, n_users=data.n_users, n_items=data.n_items, adjacency=adj)


def _scale_for(x: np.ndarray, c: float) -> float:
    """kappa with max_i ||kappa x_i|| = C (the rating party's own public-norm choice)."""
    top = float(np.linalg.norm(x, axis=1).max()) if x.size else 0.0
    return c / top if top > 0 else 1.0


def predict(model: P4GCN, t: Triples, social: torch.Tensor | None) -> np.ndarray:
    """Predicted ratings for indexed (user, item) pairs (evaluation mode)."""
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(t.users), torch.from_numpy(t.items), social).numpy()
    model.train()
    return pred.astype(np.float64)


def evaluate(model: P4GCN, t: Triples, social: torch.Tensor | None) -> tuple[float, float]:
    """(RMSE, MAE) on indexed ratings."""
    return rmse_mae(*error_sums(predict(model, t, social), t.ratings))


class SocialTrainer:
    """The rating party's training loop; `backend` None trains LightGCN alone (no social party)."""

    def __init__(self, data: SocialData, *, model_config: P4GCNConfig, config: SocialTrainConfig,
                 backend: SocialProductBackend | None) -> None:
        torch.manual_seed(config.seed)
        self.data, self.config, self.backend = data, config, backend
        self.rng = np.random.default_rng([config.seed, 7])
        self.model = build_model(data, model_config)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.cache = torch.zeros(data.n_users, model_config.dim) if backend is not None else None
        order = np.argsort(data.train.users, kind="stable")
        self._by_user = np.split(order, np.cumsum(np.bincount(data.train.users, minlength=data.n_users))[:-1])
        self._active = np.flatnonzero(np.bincount(data.train.users, minlength=data.n_users) > 0)
        self._x_sent = np.zeros((data.n_users, model_config.dim))
        self._kappa = 1.0
        self._ema = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.best_social: torch.Tensor | None = None  # the social input of the best epoch (after fit)

    def _update_ema(self) -> None:
        """ema <- decay * ema + (1 - decay) * weights (the rating party's own parameters only)."""
        decay = self.config.ema_decay
        if decay <= 0.0:
            return
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                self._ema[n].mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    def _averaged_state(self) -> dict[str, torch.Tensor]:
        """The model's state with the averaged weights (the live weights when ema_decay = 0)."""
        state = {k: v.clone() for k, v in self.model.state_dict().items()}
        if self.config.ema_decay > 0.0:
            state.update({n: v.clone() for n, v in self._ema.items()})
        return state

    def _evaluate_averaged(self, t: Triples, social: torch.Tensor | None) -> tuple[float, float, dict[str, torch.Tensor]]:
        """(RMSE, MAE, state) of the averaged weights; the live weights are restored for training."""
        state = self._averaged_state()
        if self.config.ema_decay <= 0.0:
            return (*evaluate(self.model, t, social), state)
        live = copy.deepcopy(self.model.state_dict())
        self.model.load_state_dict(state)
        rmse, mae = evaluate(self.model, t, social)
        self.model.load_state_dict(live)
        return rmse, mae, state

    def _begin_epoch(self) -> None:
        assert self.backend is not None
        x = self.model.social_input.detach().numpy().astype(np.float64)
        self._kappa = _scale_for(x, self.config.clip_norm)
        self._x_sent = clip_rows(self._kappa * x, self.config.clip_norm)
        self.backend.begin_epoch(self._x_sent)

    def _step(self, ub: np.ndarray) -> float:
        rows = np.concatenate([self._by_user[u] for u in ub])
        users = torch.from_numpy(self.data.train.users[rows])
        items = torch.from_numpy(self.data.train.items[rows])
        target = torch.from_numpy(self.data.train.ratings[rows])
        social, y_leaf = None, None
        if self.backend is not None and self.cache is not None:
            y = self.backend.forward(ub) / self._kappa
            y_leaf = torch.tensor(y, dtype=torch.float32, requires_grad=True)
            self.cache[ub] = y_leaf.detach()
            social = self.cache.index_put((torch.from_numpy(ub),), y_leaf)
        self.opt.zero_grad()
        loss = torch.mean((self.model(users, items, social) - target) ** 2)
        loss.backward()
        if self.backend is not None and y_leaf is not None and y_leaf.grad is not None:
            self._social_backward(ub, y_leaf.grad.numpy().astype(np.float64))
        self.opt.step()
        self._update_ema()
        if self.backend is not None:
            self._push_rows(ub)
        return float(loss.item())

    def _social_backward(self, ub: np.ndarray, g: np.ndarray) -> None:
        """dL/dX_B = (B L B^T) G W_P2^T (noisy), added to the gradient of the user features."""
        assert self.backend is not None
        w = self.config.backward_weight
        if w == 0.0:
            return
        kg = _scale_for(g, self.config.clip_norm)
        gx = self.backend.backward(ub, clip_rows(kg * g, self.config.clip_norm)) / kg
        emb = self.model.social_input
        if emb.grad is not None:
            emb.grad[torch.from_numpy(ub)] += w * torch.from_numpy(gx).float()

    def _push_rows(self, ub: np.ndarray) -> None:
        """Sync the batch's rows of X at the social party (still clipped to C at this epoch's scale)."""
        assert self.backend is not None
        new = clip_rows(self._kappa * self.model.social_input.detach().numpy()[ub].astype(np.float64),
                        self.config.clip_norm)
        self.backend.update_rows(ub, new - self._x_sent[ub])
        self._x_sent[ub] = new

    def run_epoch(self) -> float:
        """One pass over the users in random disjoint batches; returns the mean batch loss."""
        if self.backend is not None:
            self._begin_epoch()
        perm = self.rng.permutation(self._active)
        losses = [self._step(np.sort(ub)) for ub in np.array_split(perm, max(1, -(-perm.size // self.config.user_batch)))]
        return float(np.mean(losses))

    def fit(self) -> SocialRunResult:
        """Train with early stopping on validation RMSE (of the averaged weights); test at the best epoch."""
        best: tuple[float, int, dict[str, Any], torch.Tensor | None] = (np.inf, -1, {}, None)
        history: list[float] = []
        for epoch in range(self.config.epochs):
            self.run_epoch()
            rmse, _, state = self._evaluate_averaged(self.data.valid, self.cache)
            history.append(rmse)
            if rmse < best[0]:
                cache = None if self.cache is None else self.cache.clone()
                best = (rmse, epoch, state, cache)
            elif epoch - best[1] >= self.config.patience:
                break
        self.model.load_state_dict(best[2])
        self.best_social = best[3]
        test_pred = predict(self.model, self.data.test, best[3])
        rmse, mae = rmse_mae(*error_sums(test_pred, self.data.test.ratings))
        privacy = self.backend.privacy() if self.backend is not None else {}
        traffic = self.backend.traffic() if self.backend is not None else {}
        return SocialRunResult(rmse, mae, best[1], len(history), history, privacy, traffic,
                               predict(self.model, self.data.valid, best[3]), test_pred)
