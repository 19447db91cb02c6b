"""GCN, GAT and GGNN propagation layers in the vertical form of VerFedGNN (§4.3, App. A).

A layer at party c works in three steps so the protocol can cut it in the middle:
`contribution` (the party's own aggregate X_c^k, the matrix that is projected and shared),
`update_items` (entirely local), and `update_users` (own exact X_c^k plus the reconstructed
sum of the other parties' aggregates). `scale` = ΣᵢMᵢ / M_c.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from models import graph as g

Activation = Literal["sigmoid", "tanh", "identity", "relu"]
LayerKind = Literal["gcn", "gat", "ggnn"]


def activation(name: Activation) -> nn.Module:
    """Activation module by name."""
    table: dict[str, nn.Module] = {"sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(),
                                   "identity": nn.Identity(), "relu": nn.ReLU()}
    if name not in table:
        raise ValueError(f"unknown activation {name!r}")
    return table[name]


def _transform(dim: int, transform: bool) -> nn.Module:
    """W^k, or the identity when the layer has no transform (LightGCN-style propagation)."""
    return nn.Linear(dim, dim, bias=False) if transform else nn.Identity()


def _near_identity(weight: nn.Module, dim: int) -> None:
    """Identity-plus-noise init keeps the propagated signal on the embeddings' scale."""
    if isinstance(weight, nn.Linear):
        with torch.no_grad():
            weight.weight.copy_(torch.eye(dim) + torch.randn(dim, dim) * 0.01)


class GCNLayer(nn.Module):
    """e^{k+1} = σ(W^k (e^k + n^k)), n_u = Σ_v e_v / sqrt(E_p(N_u) N_v); W^k = I without transform."""

    def __init__(self, dim: int, act: Activation, transform: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.act_name = act
        self.weight = _transform(dim, transform)
        self.act = activation(act)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Near-identity W^k."""
        _near_identity(self.weight, self.dim)

    def contribution(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """X_c^k: this party's estimated neighbour aggregate for every user; no self coefficient."""
        w = g.gcn_edge_weight(gr, scale)
        ui, _ = g.fixed_matrices(gr, ("gcn", scale), w, w)
        return g.level_mm(ui, items, coef), None

    def update_items(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> torch.Tensor:
        """Local item update from the users' layer-k embeddings."""
        w = g.gcn_edge_weight(gr, scale)
        _, iu = g.fixed_matrices(gr, ("gcn", scale), w, w)
        return self.act(self.weight(items + g.item_total(gr, g.level_mm(iu, users, coef))))

    def update_users(self, users: torch.Tensor, neigh: torch.Tensor, self_coef: torch.Tensor | None) -> torch.Tensor:
        """User update from the combined neighbour aggregate."""
        return self.act(self.weight(users + neigh))

    def __repr__(self) -> str:
        return f"GCNLayer(dim={self.dim}, act={self.act_name})"


class GATLayer(nn.Module):
    """e^{k+1} = σ(W^k (b_uu e^k + Σ_v b_uv e_v)) with b̃ = LeakyReLU(a_s·e_u + a_n·e_v)."""

    def __init__(self, dim: int, act: Activation, transform: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.act_name = act
        self.weight = _transform(dim, transform)
        self.att_self = nn.Parameter(torch.empty(dim))
        self.att_neigh = nn.Parameter(torch.empty(dim))
        self.act = activation(act)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Near-identity W, small attention vectors (start close to uniform attention)."""
        _near_identity(self.weight, self.dim)
        with torch.no_grad():
            nn.init.normal_(self.att_self, std=0.1 / math.sqrt(self.dim))
            nn.init.normal_(self.att_neigh, std=0.1 / math.sqrt(self.dim))

    def _logits(self, center: torch.Tensor, neigh: torch.Tensor) -> torch.Tensor:
        return nn.functional.leaky_relu(center @ self.att_self + neigh @ self.att_neigh, 0.2)

    def contribution(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """X_c^k = Σ_{v ∈ N_c(u)} E_c(b_uv) e_v, plus this party's E_c(b_uu)."""
        u_sel = users.index_select(0, gr.users)
        v_sel = items.index_select(0, gr.items)
        edge_logit = self._logits(u_sel, v_sel)
        self_logit = self._logits(users, users)
        att, self_coef = g.user_attention(gr, self_logit, edge_logit, scale)
        return g.to_users(gr, items, att * g.edge_level_scale(gr, coef)), self_coef

    def update_items(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> torch.Tensor:
        """Local item update with the exact softmax over N(v) ∪ {v}."""
        edge_logit = self._logits(items.index_select(0, gr.items), users.index_select(0, gr.users))
        att, self_coef = g.item_attention(gr, self._logits(items, items), edge_logit)
        n_v = g.to_items(gr, users, att * g.edge_level_scale(gr, coef))
        return self.act(self.weight(self_coef.unsqueeze(1) * items + n_v))

    def update_users(self, users: torch.Tensor, neigh: torch.Tensor, self_coef: torch.Tensor | None) -> torch.Tensor:
        """User update; the self coefficient is the updating party's estimate E_c(b_uu)."""
        coef = self_coef if self_coef is not None else torch.ones(users.shape[0])
        return self.act(self.weight(coef.unsqueeze(1) * users + neigh))

    def __repr__(self) -> str:
        return f"GATLayer(dim={self.dim}, act={self.act_name})"


class GGNNLayer(nn.Module):
    """e^{k+1} = GRU(e^k, n^k) with n_u = Σ_p (M_p/ΣM) · mean_{v ∈ N_p(u)} e_v (eq. 16, 28)."""

    def __init__(self, dim: int, act: Activation, transform: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.act_name = act  # the GRU has its own gates; kept for a uniform constructor
        self.gru = nn.GRUCell(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default GRU initialisation."""
        self.gru.reset_parameters()

    def contribution(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(M_c/ΣM) · party-local mean, pre-weighted so that aggregates of parties simply add up."""
        ui, _ = g.fixed_matrices(gr, ("mean", 0.0), g.mean_user_weight(gr), g.mean_item_weight(gr))
        return g.level_mm(ui, items, coef) / float(scale), None

    def update_items(self, gr: g.BipartiteGraph, users: torch.Tensor, items: torch.Tensor,
                     scale: float, coef: torch.Tensor | None = None) -> torch.Tensor:
        """Local item update from the mean of the item's raters."""
        _, iu = g.fixed_matrices(gr, ("mean", 0.0), g.mean_user_weight(gr), g.mean_item_weight(gr))
        return self.gru(g.item_total(gr, g.level_mm(iu, users, coef)), items)

    def update_users(self, users: torch.Tensor, neigh: torch.Tensor, self_coef: torch.Tensor | None) -> torch.Tensor:
        """GRU step with the combined aggregate as input and e_u^k as hidden state."""
        return self.gru(neigh, users)

    def __repr__(self) -> str:
        return f"GGNNLayer(dim={self.dim})"


def make_layer(kind: LayerKind, dim: int, act: Activation, transform: bool = True) -> nn.Module:
    """Layer module by kind (`transform=False` drops W^k of GCN/GAT; GGNN always has its GRU)."""
    table = {"gcn": GCNLayer, "gat": GATLayer, "ggnn": GGNNLayer}
    if kind not in table:
        raise ValueError(f"unknown layer kind {kind!r}")
    return table[kind](dim, act, transform)
