"""VerFedGNN model: public parameters (coordinator), private item parameters (party), party forward.

Public: user embeddings e_u^0, user biases, global bias, layer weights W^k (+ attention or GRU
weights), layer-combination weights a_k, and a per-layer gate on the reconstructed aggregates
of the other parties. Private to party p: item embeddings e_v^0 and item biases, and the rows
(e_u^0, b_u) of its users outside the intersection (`PrivateUsers`; `PartyForward` propagates them).
Prediction r̂_uv = μ + b_u + b_v + h_u · h_v with h = Σ_k a_k e^k. K = 0 is biased MF.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from models import graph as g
from models.layers import Activation, make_layer
from models.scoring import serving_scores

ModelKind = Literal["gcn", "gat", "ggnn", "mf"]


class VerFedGNNConfig(BaseModel):
    """Architecture of the vertical GNN (validated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ModelKind = "gcn"
    dim: int = Field(6, ge=1, le=1024)
    layers: int = Field(2, ge=0, le=8)
    activation: Activation = "sigmoid"
    use_bias: bool = True
    gate_init: float = Field(1.0, ge=0.0, le=1.0)
    init_std: float = Field(0.1, gt=0.0, le=1.0)
    rating_levels: int = Field(0, ge=0, le=64, description="0: plain edges; L: learnable weight per rating level")
    transform: bool = Field(True, description="GCN/GAT layers apply W^k; False: LightGCN-style (W^k = I)")
    rank_dims: int = Field(0, ge=0, le=1023, description="trailing coordinates of h used only by the ranking score")
    rank_bias: bool = Field(False, description="items carry a private ranking bias c_v (ranking objective on)")

    @property
    def rating_dim(self) -> int:
        """Leading coordinates of h that the rating prediction uses (D − rank_dims)."""
        return self.dim - self.rank_dims

    @property
    def n_layers(self) -> int:
        """K, with MF forced to 0 propagation layers."""
        return 0 if self.kind == "mf" else self.layers


class PublicModel(nn.Module):
    """Parameters held by the coordinator and downloaded by every party each round."""

    def __init__(self, *, config: VerFedGNNConfig, n_users: int, global_mean: float = 0.0) -> None:
        super().__init__()
        self.config = config
        self.n_users = n_users
        self.global_mean = float(global_mean)
        d, k = config.dim, config.n_layers
        self.user_emb = nn.Parameter(torch.empty(n_users, d))
        self.user_bias = nn.Parameter(torch.empty(n_users))
        self.global_bias = nn.Parameter(torch.empty(1))
        self.layers = nn.ModuleList([make_layer(config.kind, d, config.activation, config.transform) for _ in range(k)])  # type: ignore[arg-type]
        self.layer_weights = nn.Parameter(torch.empty(k + 1))
        self.gate = nn.Parameter(torch.empty(k))
        # learnable per-layer weight of each rating level in the aggregation (extension, off by default)
        self.rating_weight = nn.Parameter(torch.empty(k, config.rating_levels)) if config.rating_levels else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) user embeddings, zero biases, μ = global mean, uniform a_k."""
        with torch.no_grad():
            nn.init.normal_(self.user_emb, std=self.config.init_std)
            self.user_bias.zero_()
            self.global_bias.fill_(self.global_mean if self.config.use_bias else 0.0)
            self.layer_weights.fill_(1.0 / (self.config.n_layers + 1))
            self.gate.fill_(self.config.gate_init)
            if self.rating_weight is not None:
                self.rating_weight.fill_(1.0)
        for layer in self.layers:
            layer.reset_parameters()  # type: ignore[operator]

    def arrays(self) -> dict[str, np.ndarray]:
        """Every public parameter as a float32 numpy array, by name."""
        return {k: v.detach().cpu().numpy().astype(np.float32, copy=True) for k, v in self.named_parameters()}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Overwrite parameters from arrays (names and shapes must match)."""
        params = dict(self.named_parameters())
        if set(arrays) != set(params):
            raise ValueError(f"public parameter names differ: {sorted(set(arrays) ^ set(params))}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(torch.from_numpy(np.asarray(arrays[name], dtype=np.float32)).reshape(p.shape))

    def __repr__(self) -> str:
        c = self.config
        return f"PublicModel(kind={c.kind}, n_users={self.n_users}, dim={c.dim}, layers={c.n_layers})"


class PrivateItems(nn.Module):
    """One party's item embeddings and biases, and the optional ranking bias c_v (never leave the party)."""

    def __init__(self, *, n_items: int, dim: int, init_std: float = 0.1, rank_bias: bool = False) -> None:
        super().__init__()
        self.n_items, self.dim, self.init_std = n_items, dim, init_std
        self.item_emb = nn.Parameter(torch.empty(n_items, dim))
        self.item_bias = nn.Parameter(torch.empty(n_items))
        self.rank_bias = nn.Parameter(torch.empty(n_items)) if rank_bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) embeddings, zero biases."""
        with torch.no_grad():
            nn.init.normal_(self.item_emb, std=self.init_std)
            self.item_bias.zero_()
            if self.rank_bias is not None:
                self.rank_bias.zero_()

    def __repr__(self) -> str:
        return f"PrivateItems(n_items={self.n_items}, dim={self.dim})"


class PrivateUsers(nn.Module):
    """Rows e_u^0 and b_u of the users one party holds outside the intersection (never leave the party)."""

    def __init__(self, *, n_users: int, dim: int, init_std: float = 0.1) -> None:
        super().__init__()
        self.n_users, self.dim, self.init_std = n_users, dim, init_std
        self.user_emb = nn.Parameter(torch.empty(n_users, dim))
        self.user_bias = nn.Parameter(torch.empty(n_users))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) embeddings, zero biases (as the public user rows)."""
        with torch.no_grad():
            nn.init.normal_(self.user_emb, std=self.init_std)
            self.user_bias.zero_()

    def __repr__(self) -> str:
        return f"PrivateUsers(n_users={self.n_users}, dim={self.dim})"


class PrivateFeatures(nn.Module):
    """A party's side-information rows (never leave the party): one embedding per user attribute value, a node
    its users link to as to an item, and one per item attribute value, added to its items' e_v^0.

    `item_links` is the (n_items, n_item_tokens) sparse matrix of each item's attribute values, each row
    scaled to mean 1/|values|, so e_v^0 = item_emb[v] + mean of its values' rows (no value: unchanged).
    """

    def __init__(self, *, n_user_tokens: int, n_item_tokens: int, dim: int, item_links: torch.Tensor | None = None,
                 init_std: float = 0.1) -> None:
        super().__init__()
        self.n_user_tokens, self.n_item_tokens, self.dim, self.init_std = n_user_tokens, n_item_tokens, dim, init_std
        self.user_attr_emb = nn.Parameter(torch.empty(n_user_tokens, dim))
        self.item_attr_emb = nn.Parameter(torch.empty(n_item_tokens, dim))
        self.item_links = item_links
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) rows, as item embeddings."""
        with torch.no_grad():
            nn.init.normal_(self.user_attr_emb, std=self.init_std)
            nn.init.normal_(self.item_attr_emb, std=self.init_std)

    def item_input(self, item_emb: torch.Tensor) -> torch.Tensor:
        """Layer-0 rows of the party's graph: enriched items, then the user attribute nodes."""
        items = item_emb
        if self.item_links is not None and self.n_item_tokens:
            items = items + torch.sparse.mm(self.item_links, self.item_attr_emb)
        return torch.cat([items, self.user_attr_emb]) if self.n_user_tokens else items

    def __repr__(self) -> str:
        return f"PrivateFeatures(user_tokens={self.n_user_tokens}, item_tokens={self.n_item_tokens}, dim={self.dim})"


class PartyForward:
    """One round's layer-by-layer forward at party c, kept alive so autograd spans the protocol steps."""

    def __init__(self, *, public: PublicModel, private: PrivateItems, graph: g.BipartiteGraph, scale: float,
                 own: PrivateUsers | None = None, own_graph: g.BipartiteGraph | None = None,
                 item_graph: g.BipartiteGraph | None = None, item_input: torch.Tensor | None = None) -> None:
        """`item_input`: layer-0 rows of the graph's items when they are not `private.item_emb` (side
        information: enriched items, then user attribute nodes; `PrivateFeatures.item_input`).
        `own`: the party's private users (rows 0.. of `own_graph`, their edges here, exact degrees);
        `item_graph`: every edge of the party, aligned users first then `own`, whose user degrees are the
        ones each side normalises by (scale·N_u^p for aligned users, N_u for private ones) at scale 1."""
        self.public, self.private, self.graph, self.scale = public, private, graph, float(scale)
        if (own is None) != (own_graph is None) or (own is None) != (item_graph is None):
            raise ValueError("private users need their graph and the party's item graph")
        self.own_graph, self.item_graph = own_graph, item_graph
        self.users: list[torch.Tensor] = [public.user_emb]
        self.items: list[torch.Tensor] = [private.item_emb if item_input is None else item_input]
        self.own_users: list[torch.Tensor] = [] if own is None else [own.user_emb]
        self._own: torch.Tensor | None = None
        self._self_coef: torch.Tensor | None = None

    @property
    def n_layers(self) -> int:
        """K."""
        return len(self.public.layers)

    def _coef(self, layer: int) -> torch.Tensor | None:
        rw = self.public.rating_weight
        return None if rw is None else rw[layer]

    def contribution(self, layer: int) -> torch.Tensor:
        """X_c^k for the current layer (with autograd); cached for `advance`."""
        if layer != len(self.users) - 1:
            raise ValueError(f"layer {layer} out of order (next is {len(self.users) - 1})")
        mod = self.public.layers[layer]
        self._own, self._self_coef = mod.contribution(  # type: ignore[operator]
            self.graph, self.users[-1], self.items[-1], self.scale, self._coef(layer))
        return self._own

    def advance(self, layer: int, others: torch.Tensor | None) -> None:
        """Compute layer k+1 from own X_c^k plus the (reconstructed, constant) others' aggregate."""
        if self._own is None or layer != len(self.users) - 1:
            raise ValueError(f"advance({layer}) without its contribution")
        mod = self.public.layers[layer]
        neigh = self._own
        if others is not None:
            neigh = neigh + self.public.gate[layer] * others.detach()
        coef = self._coef(layer)
        if self.item_graph is None:
            new_items = mod.update_items(self.graph, self.users[-1], self.items[-1], self.scale, coef)  # type: ignore[operator]
        else:
            # The private users' layer k joins their items' layer k+1, as in the party's own model; their own
            # layer k+1 reads the same items' layer k over their edges here (exact degrees, no other party).
            x_own = self.own_users[-1]
            agg, own_coef = mod.contribution(self.own_graph, x_own, self.items[-1], 1.0, coef)  # type: ignore[operator]
            new_items = mod.update_items(  # type: ignore[operator]
                self.item_graph, torch.cat([self.users[-1], x_own]), self.items[-1], 1.0, coef)
            self.own_users.append(mod.update_users(x_own, agg, own_coef))  # type: ignore[operator]
        new_users = mod.update_users(self.users[-1], neigh, self._self_coef)  # type: ignore[operator]
        self.users.append(new_users)
        self.items.append(new_items)
        self._own = self._self_coef = None

    def final(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h_u for all users, h_v for own items) = Σ_k a_k e^k."""
        if len(self.users) != self.n_layers + 1:
            raise ValueError("forward is incomplete")
        a = self.public.layer_weights
        h_u = sum(a[k] * e for k, e in enumerate(self.users))
        h_v = sum(a[k] * e for k, e in enumerate(self.items))
        return h_u, h_v  # type: ignore[return-value]

    def final_own(self) -> torch.Tensor:
        """h of the private users = Σ_k a_k e^k (after `final` is possible)."""
        if not self.own_users or len(self.own_users) != self.n_layers + 1:
            raise ValueError("no private users or the forward is incomplete")
        a = self.public.layer_weights
        return sum(a[k] * e for k, e in enumerate(self.own_users))  # type: ignore[return-value]


def party_item_graph(aligned: g.BipartiteGraph, own: g.BipartiteGraph, scale: float) -> g.BipartiteGraph:
    """Every edge of a party (aligned users, then its private users) for the item update at scale 1.

    The user degrees are the ones each side normalises by: E(N_u) = scale·N_u^p for an aligned user (its
    other edges are at other parties), N_u for a private user (all its edges are here); item degrees count
    every edge (items are local).
    """
    users = torch.cat([aligned.users, own.users + aligned.n_users])
    items = torch.cat([aligned.items, own.items])
    item_degree = torch.zeros(aligned.n_items).index_add_(0, items, torch.ones(items.shape[0]))
    return g.BipartiteGraph(users, items, aligned.n_users + own.n_users, aligned.n_items,
                            torch.cat([aligned.user_degree * float(scale), own.user_degree]), item_degree,
                            torch.cat([aligned.levels, own.levels]), aligned.n_levels)


def predict(public: PublicModel, private: PrivateItems, h_u: torch.Tensor, h_v: torch.Tensor,
            users: torch.Tensor, items: torch.Tensor, user_bias: torch.Tensor | None = None) -> torch.Tensor:
    """r̂ = μ + b_u + b_v + h_u · h_v (the first `rating_dim` coordinates) for parallel (user, local item) indices.

    `user_bias` replaces the public user biases (a party's private users: rows of `h_u` are theirs).
    """
    d = public.config.rating_dim
    dot = (h_u[:, :d].index_select(0, users) * h_v[:, :d].index_select(0, items)).sum(dim=1)
    if not public.config.use_bias:
        return dot
    b_u = public.user_bias if user_bias is None else user_bias
    return public.global_bias + b_u.index_select(0, users) + private.item_bias.index_select(0, items) + dot


def rank_scores(private: PrivateItems, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
    """s(u, v) = h_u · h_v (every coordinate) + c_v for the given user rows against all own items: (U, M).

    The serving score (models.scoring.serving_scores) of a model trained with the ranking objective.
    """
    if private.rank_bias is None:
        raise ValueError("the ranking objective needs the items' ranking bias c_v (rank_bias=True)")
    return serving_scores(h_u, h_v, rank_bias=private.rank_bias)


def softmax_rank_loss(scores: torch.Tensor, seen: torch.Tensor, pos_rows: torch.Tensor,
                      pos_items: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Full softmax ranking loss Σ_(u,v) w_uv · −log( e^{s_uv} / (e^{s_uv} + Σ_{j ∉ train(u)} e^{s_uj}) ).

    Args:
        scores: (U, M) scores of U users against the party's M items.
        seen: (U, M) bool, True on each user's training items: they are never negatives.
        pos_rows, pos_items: one entry per positive (a training pair), row of `scores` and item column.
        weights: one weight per positive (None: every w_uv = 1).
    Returns:
        The summed loss (scalar). A user whose every item is seen has no negatives and contributes 0.
    """
    lse = torch.logsumexp(scores.masked_fill(seen, float("-inf")), dim=1)
    pos = scores[pos_rows, pos_items]
    per = torch.logaddexp(lse.index_select(0, pos_rows), pos) - pos
    return (per if weights is None else per * weights).sum()


# fork_rng + manual_seed go through torch's process-wide RNG, which is not thread-safe: trainers
# built at once in one process (a party service and a coordinator in test threads) would
# interleave draws. Seeded construction is serialised here, where the global RNG is touched.
_SEEDED_INIT_LOCK = threading.Lock()


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's global RNG seeded to `seed`, restored afterwards, one thread at a time."""
    with _SEEDED_INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_public(*, config: VerFedGNNConfig, n_users: int, seed: int, global_mean: float = 0.0) -> PublicModel:
    """Public parameters initialised from `seed` without touching the global RNG."""
    with _seeded(seed):
        return PublicModel(config=config, n_users=n_users, global_mean=global_mean)


def build_private(*, config: VerFedGNNConfig, n_items: int, seed: int) -> PrivateItems:
    """A party's private item parameters initialised from `seed` without touching the global RNG."""
    with _seeded(seed):
        return PrivateItems(n_items=n_items, dim=config.dim, init_std=config.init_std, rank_bias=config.rank_bias)


def build_features(*, config: VerFedGNNConfig, n_user_tokens: int, n_item_tokens: int,
                   item_links: torch.Tensor | None, seed: int) -> PrivateFeatures:
    """A party's side-information rows initialised from `seed` without touching the global RNG."""
    with _seeded(seed):
        return PrivateFeatures(n_user_tokens=n_user_tokens, n_item_tokens=n_item_tokens, dim=config.dim,
                               item_links=item_links, init_std=config.init_std)


def build_private_users(*, config: VerFedGNNConfig, n_users: int, seed: int) -> PrivateUsers:
    """A party's private user rows initialised from `seed` without touching the global RNG."""
    with _seeded(seed):
        return PrivateUsers(n_users=n_users, dim=config.dim, init_std=config.init_std)
