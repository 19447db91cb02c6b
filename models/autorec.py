"""I-AutoRec (Sedhain et al. 2015): an item-based autoencoder over one party's own catalogue.

Each item is the vector of its ratings by every user (0 where unrated); the network encodes it to
`hidden` units, h_i = sigmoid(V r_i + c), and decodes r̂_i = W h_i + b, trained on the observed entries
only. Trained, the model factorizes: r̂(u, i) = W[u]·h_i + b[u], so serving keeps the item codes h_i and
each user's row of W and b (`AutoRecFactors`), never the ratings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class AutoRecConfig(BaseModel):
    """Settings of I-AutoRec (picked on ML-100K u1's validation split, docs/results-rating-component.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hidden: int = Field(500, ge=1)
    # λ/2·(‖W‖² + ‖V‖²) beside the summed squared errors, as in the paper; on ML-100K u1 (party 0, seed 0)
    # λ = 1 overfits (valid 1.019 after 100 epochs), 1000 underfits (1.014 at 40), 100 gave 0.9235 at 40
    l2: float = Field(100.0, ge=0.0)
    lr: float = Field(1e-3, gt=0.0)
    epochs: int = Field(40, ge=1)
    batch: int = Field(64, ge=1)  # items per step


class ItemAutoRec(nn.Module):
    """r̂_i = W sigmoid(V r_i + c) + b over item rating vectors r_i ∈ R^n_users."""

    def __init__(self, *, n_users: int, hidden: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.n_users, self.hidden = n_users, hidden
        self.encoder = nn.Linear(n_users, hidden)
        self.decoder = nn.Linear(hidden, n_users)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """U(±1/√fan_in) for weights and biases, drawn from `generator` (never the global rng: a party
        fits this inside a server whose other threads use torch too)."""
        for layer in (self.encoder, self.decoder):
            bound = 1.0 / layer.in_features ** 0.5
            with torch.no_grad():
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Item codes h_i = sigmoid(V r_i + c)."""
        return torch.sigmoid(self.encoder(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encode(x))

    def __repr__(self) -> str:
        return f"ItemAutoRec(n_users={self.n_users}, hidden={self.hidden})"


@dataclass(frozen=True)
class AutoRecFactors:
    """A trained I-AutoRec, factorized: r̂(u, i) = user_weight[u]·item_code[i] + user_offset[u]."""

    item_code: np.ndarray  # float32 (M, hidden)
    user_weight: np.ndarray  # float32 (N, hidden)
    user_offset: np.ndarray  # float32 (N,)

    def predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Unclipped predictions for parallel index arrays (float64)."""
        return (np.einsum("nd,nd->n", self.user_weight[users].astype(np.float64),
                          self.item_code[items].astype(np.float64)) + self.user_offset[users])


def item_matrix(*, users: np.ndarray, items: np.ndarray, ratings: np.ndarray, n_users: int,
                n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense (M, N) ratings and observed mask from triples (a later duplicate overwrites an earlier one)."""
    x = torch.zeros(n_items, n_users)
    mask = torch.zeros(n_items, n_users)
    i, u = torch.as_tensor(items, dtype=torch.long), torch.as_tensor(users, dtype=torch.long)
    x[i, u] = torch.as_tensor(ratings, dtype=torch.float32)
    mask[i, u] = 1.0
    return x, mask


def fit_item_autorec(*, users: np.ndarray, items: np.ndarray, ratings: np.ndarray, n_users: int, n_items: int,
                     config: AutoRecConfig, seed: int) -> AutoRecFactors:
    """Train I-AutoRec with Adam on mini-batches of items for `config.epochs` epochs (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    net = ItemAutoRec(n_users=n_users, hidden=config.hidden, generator=gen)
    x, mask = item_matrix(users=users, items=items, ratings=ratings, n_users=n_users, n_items=n_items)
    opt = torch.optim.Adam(net.parameters(), lr=config.lr)
    n_obs = max(float(mask.sum()), 1.0)
    for _ in range(config.epochs):
        order = torch.randperm(n_items, generator=gen)
        for lo in range(0, n_items, config.batch):
            rows = order[lo:lo + config.batch]
            xb, mb = x[rows], mask[rows]
            err = ((net(xb) - xb) * mb).pow(2).sum()
            # the penalty is spread over batches in proportion to their share of the observed entries
            share = float(mb.sum()) / n_obs
            reg = 0.5 * config.l2 * share * (net.encoder.weight.pow(2).sum() + net.decoder.weight.pow(2).sum())
            opt.zero_grad()
            ((err + reg) / max(float(mb.sum()), 1.0)).backward()
            opt.step()
    with torch.no_grad():
        code = net.encode(x)
    return AutoRecFactors(item_code=code.numpy().astype(np.float32),
                          user_weight=net.decoder.weight.detach().numpy().astype(np.float32).copy(),
                          user_offset=net.decoder.bias.detach().numpy().astype(np.float32).copy())
