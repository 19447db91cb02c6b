"""P4GCN at the rating party (paper §4.3, App. B): LightGCN + social GCN from sandwich products + fusion.

x^(1): LightGCN user/item embeddings; Y_B = L_sym X W_P2 arrives (noisy, decrypted) from the social
party, and the rating party finishes the social GC layer locally: x^(2) = act(Y W_P1 + b), so
W = W_P2 W_P1 and dL/dW_P1 = (L_sym X W_P2)^T dL/d(Y W_P1) needs nothing from the social party.
Fusion: x^(3) = h ⊙ (2d · softmax(W_f2 ReLU(W_f1 h))) with h = [x^(1) | x^(2)] (2d · keeps the mean
weight at 1). Decoder: r̂ = r_min + (r_max - r_min) sigmoid(MLP([x_u^(3) | x_v^(1)])).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from models.lightgcn import LightGCN, LightGCNConfig, RatingDecoder

SocialActivation = Literal["identity", "relu", "tanh"]


class P4GCNConfig(LightGCNConfig):
    """P4GCN hyper-parameters at the rating party: LightGCN's plus the social branch (validated)."""

    social_activation: SocialActivation = "tanh"
    fusion: bool = True  # False: average with weight beta (the paper's ablation)
    beta: float = Field(0.1, ge=0.0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)  # on the decoder input
    biases: bool = False  # user and item bias logits added before the decoder's sigmoid


class FusionLayer(nn.Module):
    """Position-wise re-weighting of h = [x1 | x2] by a two-layer softmax MLP (2d → 2d → 2d)."""

    def __init__(self, *, width: int) -> None:
        super().__init__()
        self.width = width
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Default init; a zero last layer starts from uniform weights (x^(3) = h)."""
        self.fc1.reset_parameters()
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """x^(3) = h ⊙ (width · softmax(MLP(h)))."""
        weights = torch.softmax(self.fc2(torch.relu(self.fc1(h))), dim=1)
        return h * weights * self.width

    def __repr__(self) -> str:
        return f"FusionLayer(width={self.width})"


class P4GCN(nn.Module):
    """Rating-party model; `social` rows are the rescaled, decrypted products Y = L_sym X W_P2."""

    def __init__(self, *, config: P4GCNConfig, n_users: int, n_items: int, adjacency: torch.Tensor) -> None:
        super().__init__()
        self.config = config
        d = config.dim
        self.gcn = LightGCN(n_users=n_users, n_items=n_items, adjacency=adjacency, dim=d,
                            layers=config.layers, init_std=config.init_std)
        self.w_p1 = nn.Linear(d, d)
        self.user_bias = nn.Parameter(torch.zeros(n_users))
        self.item_bias = nn.Parameter(torch.zeros(n_items))
        self.fusion = FusionLayer(width=2 * d)
        self.decoder = RatingDecoder(in_dim=3 * d if config.fusion else 2 * d, hidden=d,
                                     rating_min=config.rating_min, rating_max=config.rating_max,
                                     dropout=config.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every parameter."""
        self.gcn.reset_parameters()
        self.w_p1.reset_parameters()
        nn.init.zeros_(self.user_bias)
        nn.init.zeros_(self.item_bias)
        self.fusion.reset_parameters()
        self.decoder.reset_parameters()

    @property
    def social_input(self) -> nn.Parameter:
        """X, the user features sent (encrypted) to the social party: the layer-0 user embeddings."""
        return self.gcn.user_emb

    def social_embedding(self, y: torch.Tensor) -> torch.Tensor:
        """x^(2) = act(Y W_P1 + b)."""
        z = self.w_p1(y)
        act = self.config.social_activation
        return z if act == "identity" else torch.relu(z) if act == "relu" else torch.tanh(z)

    def forward(self, users: torch.Tensor, items: torch.Tensor, social: torch.Tensor | None) -> torch.Tensor:
        """Predicted ratings; social is (n_users, d) or None (then x^(2) = 0)."""
        xu, xv = self.gcn()
        x1 = xu[users]
        if social is None:
            x2 = torch.zeros_like(x1)
        else:
            x2 = self.social_embedding(social[users])
        if self.config.fusion:
            x3 = self.fusion(torch.cat([x1, x2], dim=1))
        else:
            x3 = torch.cat([x1 + self.config.beta * x2], dim=1)
        offset = self.user_bias[users] + self.item_bias[items] if self.config.biases else None
        return self.decoder(x3, xv[items], offset)

    def __repr__(self) -> str:
        return f"P4GCN({self.gcn!r}, w_p1={self.config.dim}x{self.config.dim}, {self.fusion!r}, {self.decoder!r})"
