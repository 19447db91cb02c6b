"""Test oracle: centralized GNN recommenders (GCN, GAT, GGNN) with the textbook (non-estimated) formulas.

One owner holds every edge, so N_u and the attention softmax are exact. Written with
torch.sparse matrices, independently of the vertical code path, so that tests can check that
the vertical model with one party and privacy off computes the same function. It lives with the
tests because only they use it: the centralized protocol of the experiments is the vertical engine
with one party holding every item (services/evaluation/harness.py::merge_parties).
"""

from __future__ import annotations

import torch
from torch import nn

from models.graph import BipartiteGraph
from models.layers import GATLayer, GCNLayer, GGNNLayer
from models.vertical import PrivateItems, PublicModel


def _sparse(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False).coalesce()


class CentralGNN(nn.Module):
    """Full-graph forward: returns (h_u, h_v) for every user and item."""

    def __init__(self, *, public: PublicModel, items: PrivateItems, graph: BipartiteGraph) -> None:
        super().__init__()
        self.public, self.items, self.graph = public, items, graph

    def _gcn_adj(self) -> tuple[torch.Tensor, torch.Tensor]:
        gr = self.graph
        w = 1.0 / torch.sqrt(gr.user_degree[gr.users] * gr.item_degree[gr.items])
        ui = _sparse(gr.users, gr.items, w, (gr.n_users, gr.n_items))
        return ui, ui.t().coalesce()

    def _mean_adj(self) -> tuple[torch.Tensor, torch.Tensor]:
        gr = self.graph
        ui = _sparse(gr.users, gr.items, 1.0 / gr.user_degree[gr.users], (gr.n_users, gr.n_items))
        iu = _sparse(gr.items, gr.users, 1.0 / gr.item_degree[gr.items], (gr.n_items, gr.n_users))
        return ui, iu

    @staticmethod
    def _softmax_side(layer: GATLayer, center: torch.Tensor, neigh: torch.Tensor, c_idx: torch.Tensor,
                      n_idx: torch.Tensor) -> torch.Tensor:
        """Σ_{j ∈ N(i) ∪ {i}} softmax_j(Att(e_i, e_j)) e_j for every center i."""
        self_l = nn.functional.leaky_relu(center @ layer.att_self + center @ layer.att_neigh, 0.2)
        edge_l = nn.functional.leaky_relu(center[c_idx] @ layer.att_self + neigh[n_idx] @ layer.att_neigh, 0.2)
        top = torch.maximum(self_l, torch.full_like(self_l, -1e30).scatter_reduce(0, c_idx, edge_l, "amax"))
        se, ee = torch.exp(self_l - top), torch.exp(edge_l - top[c_idx])
        z = se + torch.zeros_like(se).index_add(0, c_idx, ee)
        agg = torch.zeros_like(center).index_add(0, c_idx, (ee / z[c_idx]).unsqueeze(1) * neigh[n_idx])
        return (se / z).unsqueeze(1) * center + agg

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h_u, h_v) = Σ_k a_k e^k over every layer."""
        users, items = [self.public.user_emb], [self.items.item_emb]
        gr = self.graph
        for layer in self.public.layers:
            u, v = users[-1], items[-1]
            if isinstance(layer, GCNLayer):
                ui, iu = self._gcn_adj()
                nu, nv = torch.sparse.mm(ui, v), torch.sparse.mm(iu, u)
                users.append(layer.act(layer.weight(u + nu)))
                items.append(layer.act(layer.weight(v + nv)))
            elif isinstance(layer, GATLayer):
                users.append(layer.act(layer.weight(self._softmax_side(layer, u, v, gr.users, gr.items))))
                items.append(layer.act(layer.weight(self._softmax_side(layer, v, u, gr.items, gr.users))))
            elif isinstance(layer, GGNNLayer):
                ui, iu = self._mean_adj()
                users.append(layer.gru(torch.sparse.mm(ui, v), u))
                items.append(layer.gru(torch.sparse.mm(iu, u), v))
            else:
                raise TypeError(f"unsupported layer {layer!r}")
        a = self.public.layer_weights
        h_u = sum(a[k] * e for k, e in enumerate(users))
        h_v = sum(a[k] * e for k, e in enumerate(items))
        return h_u, h_v  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"CentralGNN(kind={self.public.config.kind}, layers={len(self.public.layers)})"
