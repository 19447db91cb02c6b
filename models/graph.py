"""Sparse user–item graph held by one party, and the neighbour aggregations of VerFedGNN §4.3.

Every aggregation is an edge list plus `index_add_`; no dense users × items matrix exists.
`scale` is the party's item-share correction ΣᵢMᵢ / M_p (1 for a party holding every item).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Protocol

import torch


class ItemReducer(Protocol):
    """Sums and maxima over an item's users when those users are split across worker processes."""

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Σ over workers of per-item partial sums (differentiable)."""
        ...

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise max over workers (no gradient: softmax shifts only)."""
        ...


@dataclass(frozen=True)
class BipartiteGraph:
    """Edges (user, item) of one party; item indices are local to the party."""

    users: torch.Tensor  # int64 (E,)
    items: torch.Tensor  # int64 (E,)
    n_users: int
    n_items: int
    user_degree: torch.Tensor  # float32 (n_users,): N_u^p, edges of this party only
    item_degree: torch.Tensor  # float32 (n_items,): N_v (exact: items are local)
    levels: torch.Tensor  # int64 (E,): rating level of each edge (0 when levels are not used)
    n_levels: int = 1
    cache: dict[tuple[str, float], tuple[list[torch.Tensor], list[torch.Tensor]]] = field(
        default_factory=dict, repr=False)
    # Distributed training (services.verfedgnn.distributed): this graph holds one worker's users, and
    # item-side sums over users are completed across workers; None: the graph holds every user.
    reducer: ItemReducer | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def from_edges(users: torch.Tensor, items: torch.Tensor, *, n_users: int, n_items: int,
                   levels: torch.Tensor | None = None, n_levels: int = 1) -> BipartiteGraph:
        """Build a graph from parallel index tensors (duplicates are kept as given)."""
        users = users.to(torch.int64)
        items = items.to(torch.int64)
        ones = torch.ones(users.shape[0], dtype=torch.float32)
        udeg = torch.zeros(n_users, dtype=torch.float32).index_add_(0, users, ones)
        ideg = torch.zeros(n_items, dtype=torch.float32).index_add_(0, items, ones)
        lv = torch.zeros_like(users) if levels is None else levels.to(torch.int64)
        if lv.numel() and (int(lv.min()) < 0 or int(lv.max()) >= n_levels):
            raise ValueError(f"edge levels must lie in [0, {n_levels})")
        return BipartiteGraph(users, items, n_users, n_items, udeg, ideg, lv, n_levels)

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return int(self.users.shape[0])


def to_users(graph: BipartiteGraph, item_x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Row u = Σ_{v ∈ N_p(u)} weight_uv · item_x[v]  → (n_users, D)."""
    msg = item_x.index_select(0, graph.items) * weight.unsqueeze(1)
    return torch.zeros(graph.n_users, item_x.shape[1], dtype=item_x.dtype).index_add_(0, graph.users, msg)


def to_items(graph: BipartiteGraph, user_x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Row v = Σ_{u ∈ N(v)} weight_uv · user_x[u]  → (n_items, D)."""
    msg = user_x.index_select(0, graph.users) * weight.unsqueeze(1)
    return item_total(graph, torch.zeros(graph.n_items, user_x.shape[1], dtype=user_x.dtype)
                      .index_add_(0, graph.items, msg))


def item_total(graph: BipartiteGraph, partial: torch.Tensor) -> torch.Tensor:
    """An item-side sum over this graph's users, completed over every worker's users when sharded."""
    return partial if graph.reducer is None else graph.reducer.sum(partial)


def _csr(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """CSR matrix from COO triples (duplicates summed)."""
    coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=False).coalesce()
    with warnings.catch_warnings():  # "CSR support is in beta" is noise here
        warnings.simplefilter("ignore")
        return coo.to_sparse_csr()


def fixed_matrices(graph: BipartiteGraph, key: tuple[str, float], to_user_w: torch.Tensor,
                   to_item_w: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Cached CSR matrices (users × items, items × users) of constant edge weights, one per rating level.

    Sparse matmuls are several times faster than gather/scatter in both passes; only
    parameter-free weights (GCN, mean) can be cached.
    """
    if key not in graph.cache:
        ui, iu = [], []
        for lv in range(graph.n_levels):
            m = graph.levels == lv
            ui.append(_csr(graph.users[m], graph.items[m], to_user_w.detach()[m], (graph.n_users, graph.n_items)))
            iu.append(_csr(graph.items[m], graph.users[m], to_item_w.detach()[m], (graph.n_items, graph.n_users)))
        graph.cache[key] = (ui, iu)
    return graph.cache[key]


def level_mm(mats: list[torch.Tensor], x: torch.Tensor, coef: torch.Tensor | None) -> torch.Tensor:
    """Σ_l coef_l · (A_l @ x): rating-level-weighted aggregation (coef None: plain A @ x, one level)."""
    if coef is None:
        if len(mats) != 1:
            raise ValueError("several rating levels need level coefficients")
        return torch.sparse.mm(mats[0], x)
    return sum(coef[lv] * torch.sparse.mm(m, x) for lv, m in enumerate(mats))  # type: ignore[return-value]


def edge_level_scale(graph: BipartiteGraph, coef: torch.Tensor | None) -> torch.Tensor | float:
    """Per-edge multiplier coef[level] (1 when levels are not used)."""
    return 1.0 if coef is None else coef.index_select(0, graph.levels)


def estimated_user_degree(graph: BipartiteGraph, scale: float) -> torch.Tensor:
    """E_p(N_u) = (ΣᵢMᵢ / M_p) · N_u^p (VerFedGNN eq. 12)."""
    return graph.user_degree * float(scale)


def gcn_edge_weight(graph: BipartiteGraph, scale: float) -> torch.Tensor:
    """1 / sqrt(E_p(N_u) · N_v) per edge (eq. 13); exact GCN normalisation when scale = 1."""
    nu = estimated_user_degree(graph, scale).index_select(0, graph.users)
    nv = graph.item_degree.index_select(0, graph.items)
    return torch.rsqrt(nu * nv)


def mean_user_weight(graph: BipartiteGraph) -> torch.Tensor:
    """1 / N_u^p per edge: the party-local mean of eq. 16 (GGNN)."""
    return 1.0 / graph.user_degree.index_select(0, graph.users)


def mean_item_weight(graph: BipartiteGraph) -> torch.Tensor:
    """1 / N_v per edge: the item-side mean (GGNN)."""
    return 1.0 / graph.item_degree.index_select(0, graph.items)


def segment_max(index: torch.Tensor, values: torch.Tensor, size: int, floor: torch.Tensor) -> torch.Tensor:
    """max(floor[i], max over values with index == i), differentiable-free shift for a stable softmax."""
    out = floor.detach().clone()
    return out.scatter_reduce_(0, index, values.detach(), reduce="amax", include_self=True)


def user_attention(
    graph: BipartiteGraph, self_logit: torch.Tensor, edge_logit: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Estimated user-side attention of eq. 14.

    E_p(b_uv) = exp(b̃_uv) / (exp(b̃_uu) + scale · Σ_{v' ∈ N_p(u)} exp(b̃_uv')); the same
    denominator gives E_p(b_uu). With scale = 1 and one party this is the exact softmax over
    N(u) ∪ {u}.

    Returns:
        (per-edge coefficients (E,), per-user self coefficients (n_users,)).
    """
    shift = segment_max(graph.users, edge_logit, graph.n_users, self_logit)
    self_exp = torch.exp(self_logit - shift)
    edge_exp = torch.exp(edge_logit - shift.index_select(0, graph.users))
    neigh = torch.zeros(graph.n_users, dtype=edge_exp.dtype).index_add_(0, graph.users, edge_exp)
    denom = self_exp + float(scale) * neigh
    return edge_exp / denom.index_select(0, graph.users), self_exp / denom


def item_attention(
    graph: BipartiteGraph, self_logit: torch.Tensor, edge_logit: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact item-side softmax over N(v) ∪ {v} (all of an item's edges are local)."""
    shift = segment_max(graph.items, edge_logit, graph.n_items, self_logit)
    if graph.reducer is not None:  # one shift per item at every worker (any common shift is exact)
        shift = graph.reducer.max(shift)
    self_exp = torch.exp(self_logit - shift)
    edge_exp = torch.exp(edge_logit - shift.index_select(0, graph.items))
    denom = self_exp + item_total(graph, torch.zeros(graph.n_items, dtype=edge_exp.dtype)
                                  .index_add_(0, graph.items, edge_exp))
    return edge_exp / denom.index_select(0, graph.items), self_exp / denom
