"""Biased matrix factorization baseline: r̂ = μ + b_u + b_v + p_u · q_v (centralized reference).

The federated engine runs the same predictor as `VerFedGNNConfig(kind="mf")` (K = 0). Only tests use
this module today; it stays for the centralized BPR-MF baseline of the ranking harness (issue 11:
the same scorer trained with a pairwise loss, beside most-popular, EASE and LightGCN-BPR).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class MFConfig(BaseModel):
    """Biased MF hyper-parameters (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim: int = Field(32, ge=1, le=1024)
    init_std: float = Field(0.1, gt=0.0, le=1.0)


class BiasedMF(nn.Module):
    """Biased matrix factorization."""

    def __init__(self, config: MFConfig, *, n_users: int, n_items: int, global_mean: float, seed: int) -> None:
        super().__init__()
        self.config, self.n_users, self.n_items = config, n_users, n_items
        self.global_mean, self.seed = float(global_mean), seed
        self.user_emb = nn.Parameter(torch.empty(n_users, config.dim))
        self.item_emb = nn.Parameter(torch.empty(n_items, config.dim))
        self.user_bias = nn.Parameter(torch.empty(n_users))
        self.item_bias = nn.Parameter(torch.empty(n_items))
        self.global_bias = nn.Parameter(torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Seeded N(0, init_std) factors, zero biases, μ = global mean (global RNG untouched)."""
        gen = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            self.user_emb.copy_(torch.randn(self.user_emb.shape, generator=gen) * self.config.init_std)
            self.item_emb.copy_(torch.randn(self.item_emb.shape, generator=gen) * self.config.init_std)
            self.user_bias.zero_()
            self.item_bias.zero_()
            self.global_bias.fill_(self.global_mean)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Predicted ratings of parallel (user, item) index tensors."""
        dot = (self.user_emb[users] * self.item_emb[items]).sum(dim=1)
        return self.global_bias + self.user_bias[users] + self.item_bias[items] + dot

    def __repr__(self) -> str:
        return f"BiasedMF(n_users={self.n_users}, n_items={self.n_items}, dim={self.config.dim})"
