"""LightGCN over the user–item rating graph, with the rating decoder P4GCN uses (paper App. B).

LightGCN (He et al. 2020): E^(k+1) = Â E^(k) with Â = D^-1/2 [[0, R], [R^T, 0]] D^-1/2 (sparse),
output X^(1) = mean_k E^(k), k = 0..K. The decoder maps [x_u | x_v] to
r̂ = r_min + (r_max - r_min) * sigmoid(MLP([x_u | x_v])).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class LightGCNConfig(BaseModel):
    """LightGCN + MLP-decoder hyper-parameters (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim: int = Field(64, ge=1, le=1024)
    layers: int = Field(2, ge=0, le=6)
    init_std: float = Field(0.1, gt=0.0, le=1.0)
    rating_min: float = 0.5
    rating_max: float = 4.0


def normalized_bipartite(users: np.ndarray, items: np.ndarray, n_users: int, n_items: int) -> torch.Tensor:
    """Sparse symmetric Â = D^-1/2 A D^-1/2 of the (n_users + n_items) bipartite graph (duplicates merged)."""
    pairs = np.unique(np.stack([users, items + n_users]).astype(np.int64), axis=1)
    rows = np.concatenate([pairs[0], pairs[1]])
    cols = np.concatenate([pairs[1], pairs[0]])
    n = n_users + n_items
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1.0)), 0.0)
    vals = inv[rows] * inv[cols]
    idx = torch.from_numpy(np.stack([rows, cols]))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(vals).float(), (n, n)).coalesce()


class RatingDecoder(nn.Module):
    """r̂ = r_min + (r_max - r_min) * sigmoid(W2 ReLU(W1 [x_u | x_v] + b1) + b2)."""

    def __init__(self, *, in_dim: int, hidden: int, rating_min: float, rating_max: float,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.in_dim, self.hidden = in_dim, hidden
        self.dropout = nn.Dropout(dropout)
        self.rating_min, self.rating_max = float(rating_min), float(rating_max)
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Default (Kaiming-uniform) init of both layers."""
        self.fc1.reset_parameters()
        self.fc2.reset_parameters()

    def forward(self, x_user: torch.Tensor, x_item: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted ratings (B,) for paired user/item rows; `offset` (B,) is added before the sigmoid."""
        h = torch.relu(self.fc1(self.dropout(torch.cat([x_user, x_item], dim=1))))
        logit = self.fc2(h).squeeze(1)
        if offset is not None:
            logit = logit + offset
        span = self.rating_max - self.rating_min
        return self.rating_min + span * torch.sigmoid(logit)

    def __repr__(self) -> str:
        return f"RatingDecoder(in_dim={self.in_dim}, hidden={self.hidden}, range=[{self.rating_min}, {self.rating_max}])"


class LightGCN(nn.Module):
    """User/item embeddings E^(0) propagated K times over Â; output the layer mean."""

    def __init__(self, *, n_users: int, n_items: int, adjacency: torch.Tensor, dim: int, layers: int,
                 init_std: float) -> None:
        super().__init__()
        self.n_users, self.n_items, self.dim, self.layers, self.init_std = n_users, n_items, dim, layers, init_std
        if tuple(adjacency.shape) != (n_users + n_items, n_users + n_items):
            raise ValueError(f"adjacency shape {tuple(adjacency.shape)} != {(n_users + n_items,) * 2}")
        self.adjacency = adjacency
        self.user_emb = nn.Parameter(torch.empty(n_users, dim))
        self.item_emb = nn.Parameter(torch.empty(n_items, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) embeddings."""
        nn.init.normal_(self.user_emb, std=self.init_std)
        nn.init.normal_(self.item_emb, std=self.init_std)

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(X_user^(1), X_item^(1)) for all users and items."""
        e = torch.cat([self.user_emb, self.item_emb], dim=0)
        total = e
        for _ in range(self.layers):
            e = self.adjacency @ e
            total = total + e
        out = total / (self.layers + 1)
        return out[: self.n_users], out[self.n_users:]

    def __repr__(self) -> str:
        return f"LightGCN(users={self.n_users}, items={self.n_items}, dim={self.dim}, layers={self.layers})"


class LightGCNRecommender(nn.Module):
    """The rating party's model without the social party: LightGCN + the same decoder as P4GCN."""

    def __init__(self, *, config: LightGCNConfig, n_users: int, n_items: int, adjacency: torch.Tensor) -> None:
        super().__init__()
        self.config = config
        self.gcn = LightGCN(n_users=n_users, n_items=n_items, adjacency=adjacency, dim=config.dim,
                            layers=config.layers, init_std=config.init_std)
        self.decoder = RatingDecoder(in_dim=2 * config.dim, hidden=config.dim, rating_min=config.rating_min,
                                     rating_max=config.rating_max)

    def reset_parameters(self) -> None:
        """Re-initialise every parameter."""
        self.gcn.reset_parameters()
        self.decoder.reset_parameters()

    def forward(self, users: torch.Tensor, items: torch.Tensor, social: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted ratings for (users, items); `social` is ignored (no social party)."""
        xu, xv = self.gcn()
        return self.decoder(xu[users], xv[items])

    def __repr__(self) -> str:
        return f"LightGCNRecommender({self.gcn!r}, {self.decoder!r})"
